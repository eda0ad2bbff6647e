"""norms.layer_norm's forward kernel with the statistics from a helper function (the
variance of the centred rows, never E[x^2] - E[x]^2, as sums over D), ** for the
square, and the per-row outputs stored with one tuple assignment."""
PUZZLE = "norms.layer_norm"


def _row_stats(x, eps):
    n = x.shape[-1]
    mean = x.sum(axis=-1, keepdims=True) / n
    centred = x - mean
    return mean, centred, jax.lax.rsqrt((centred ** 2).sum(axis=-1, keepdims=True) / n + eps)


def layer_norm_forward_kernel(x_ref, scale_ref, bias_ref, y_ref, mean_ref, rstd_ref, *, eps):
    mean, centred, rstd = _row_stats(x_ref[...].astype(jnp.float32), eps)
    mean_ref[...], rstd_ref[...] = mean, rstd
    affine = centred * rstd
    y_ref[...] = (affine * scale_ref[...].astype(jnp.float32)
                  + bias_ref[...].astype(jnp.float32)).astype(y_ref.dtype)
