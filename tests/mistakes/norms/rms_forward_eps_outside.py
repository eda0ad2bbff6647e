"""norms.rms_forward: eps added to the rms instead of under the square root."""
PUZZLE = "norms.rms_forward"
EXPECT = "eps went outside the square root"


def rms_norm_forward_kernel(x_ref, scale_ref, y_ref, inv_rms_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    inv_rms = 1 / (jnp.sqrt(jnp.mean(x * x, axis=1, keepdims=True)) + eps)
    y_ref[...] = (x * inv_rms * scale_ref[...].astype(jnp.float32)).astype(y_ref.dtype)
    inv_rms_ref[...] = inv_rms
