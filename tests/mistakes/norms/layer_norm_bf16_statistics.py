"""norms.layer_norm: the forward never casts the rows: the mean, the centred rows, the
variance and y are computed in bf16. Every y is within 2% (the value check passes), but
not the exact value rounded once."""
PUZZLE = "norms.layer_norm"
EXPECT = "your y is bfloat16 rounded more than once"


def layer_norm_forward_kernel(x_ref, scale_ref, bias_ref, y_ref, mean_ref, rstd_ref, *, eps):
    x = x_ref[...]                                      # bf16 for bf16 rows
    mean = jnp.mean(x, axis=1, keepdims=True)
    centred = x - mean
    rstd = jax.lax.rsqrt(jnp.mean(centred * centred, axis=1, keepdims=True) + eps)
    y = centred * rstd * scale_ref[...] + bias_ref[...]
    y_ref[...] = y.astype(y_ref.dtype)
    mean_ref[...] = mean.astype(jnp.float32)
    rstd_ref[...] = rstd.astype(jnp.float32)
