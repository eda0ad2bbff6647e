"""quant.quantize: one scale for the whole block (the max over every row), not one per row."""
PUZZLE = "quant.quantize"
EXPECT = "the scale is per row"


def quantize_kernel(x_ref, q_ref, scale_ref):
    x = x_ref[...].astype(jnp.float32)
    amax = jnp.max(jnp.abs(x))
    scale = jnp.where(amax > 0, amax / 127, 1.0)
    q_ref[...] = jnp.clip(jnp.round(x / scale), -127, 127).astype(q_ref.dtype)
    scale_ref[...] = jnp.full(scale_ref.shape, scale, jnp.float32)
