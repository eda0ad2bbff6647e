"""norms.rms_forward: the sum of the squares under the root, not their mean."""
PUZZLE = "norms.rms_forward"
EXPECT = "the mean (not the sum) of the squares"


def rms_norm_forward_kernel(x_ref, scale_ref, y_ref, inv_rms_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    inv_rms = jax.lax.rsqrt(jnp.sum(x * x, axis=1, keepdims=True) + eps)   # (rows, 1)
    y_ref[...] = (x * inv_rms * scale_ref[...].astype(jnp.float32)).astype(y_ref.dtype)
    inv_rms_ref[...] = inv_rms     # one float per row: all the backward needs besides x
