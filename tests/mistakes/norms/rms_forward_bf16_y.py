"""norms.rms_forward: 1 / rms is float32, but y is computed from the bf16 block, 1 / rms
cast to bf16 and the bf16 scale: three roundings where one (the store) is the lesson."""
PUZZLE = "norms.rms_forward"
EXPECT = "Compute x * inv_rms * scale in float32 and cast once"


def rms_norm_forward_kernel(x_ref, scale_ref, y_ref, inv_rms_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    inv_rms = jax.lax.rsqrt(jnp.mean(x * x, axis=1, keepdims=True) + eps)
    y_ref[...] = (x_ref[...] * inv_rms.astype(x_ref.dtype) * scale_ref[...]).astype(y_ref.dtype)
    inv_rms_ref[...] = inv_rms
