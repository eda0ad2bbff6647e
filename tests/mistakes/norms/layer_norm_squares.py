"""norms.layer_norm: the variance as E[x^2] - E[x]^2, which cancels in float32 for rows
far from zero."""
PUZZLE = "norms.layer_norm"
EXPECT = "E[x^2] - E[x]^2 subtracts two numbers near 10000"


def layer_norm_forward_kernel(x_ref, scale_ref, bias_ref, y_ref, mean_ref, rstd_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    mean = jnp.mean(x, axis=1, keepdims=True)
    var = jnp.mean(x * x, axis=1, keepdims=True) - mean * mean
    rstd = jax.lax.rsqrt(var + eps)
    y = (x - mean) * rstd * scale_ref[...].astype(jnp.float32) \
        + bias_ref[...].astype(jnp.float32)
    y_ref[...] = y.astype(y_ref.dtype)
    mean_ref[...] = mean
    rstd_ref[...] = rstd
