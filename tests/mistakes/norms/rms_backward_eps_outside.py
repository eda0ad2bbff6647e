"""norms.rms_backward: rms_norm's forward takes 1 / (sqrt(mean(x^2)) + eps): only a row
near zero shows it (eps=1e-6 here)."""
PUZZLE = "norms.rms_backward"
EXPECT = "eps went outside the square root"
AVOID = "compare the program ids"


def rms_norm_forward_kernel(x_ref, scale_ref, y_ref, inv_rms_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    inv_rms = 1 / (jnp.sqrt(jnp.mean(x * x, axis=1, keepdims=True)) + eps)
    y_ref[...] = (x * inv_rms * scale_ref[...].astype(jnp.float32)).astype(y_ref.dtype)
    inv_rms_ref[...] = inv_rms
