"""norms.layer_norm: 1 / (sqrt(var) + eps) instead of rsqrt(var + eps). Invisible on rows
of variance near 1; the near-constant row of the test shows it."""
PUZZLE = "norms.layer_norm"
EXPECT = "eps went outside the square root"
AVOID = "compare the program ids"


def layer_norm_forward_kernel(x_ref, scale_ref, bias_ref, y_ref, mean_ref, rstd_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    mean = jnp.mean(x, axis=1, keepdims=True)
    centred = x - mean
    rstd = 1 / (jnp.sqrt(jnp.mean(centred * centred, axis=1, keepdims=True)) + eps)
    y_ref[...] = (centred * rstd * scale_ref[...].astype(jnp.float32)
                  + bias_ref[...].astype(jnp.float32)).astype(y_ref.dtype)
    mean_ref[...] = mean
    rstd_ref[...] = rstd
