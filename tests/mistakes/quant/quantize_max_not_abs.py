"""quant.quantize: the scale comes from the largest x of a row, not the largest |x|."""
PUZZLE = "quant.quantize"
EXPECT = "not the largest |x|"
AVOID = "compare the program ids"


def quantize_kernel(x_ref, q_ref, scale_ref):
    x = x_ref[...].astype(jnp.float32)
    amax = jnp.max(x, axis=1, keepdims=True)
    scale = jnp.where(amax > 0, amax / 127, 1.0)
    q = jnp.clip(jnp.round(x / scale), -127, 127)
    q_ref[...] = q.astype(q_ref.dtype)
    scale_ref[...] = scale
