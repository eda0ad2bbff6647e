"""norms.layer_norm: the variance divides by D - 1 (a sample variance)."""
PUZZLE = "norms.layer_norm"
EXPECT = "LayerNorm divides by D"


def layer_norm_forward_kernel(x_ref, scale_ref, bias_ref, y_ref, mean_ref, rstd_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    D = x.shape[1]
    mean = jnp.mean(x, axis=1, keepdims=True)
    centred = x - mean
    rstd = jax.lax.rsqrt(jnp.sum(centred * centred, axis=1, keepdims=True) / (D - 1) + eps)
    y = centred * rstd * scale_ref[...].astype(jnp.float32) + bias_ref[...].astype(jnp.float32)
    y_ref[...] = y.astype(y_ref.dtype)
    mean_ref[...] = mean
    rstd_ref[...] = rstd
