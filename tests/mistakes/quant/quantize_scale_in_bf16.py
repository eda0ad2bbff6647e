"""quant.quantize: the scale computed from the bf16 x and cast to float32 only at the
store: it keeps bf16's rounding."""
PUZZLE = "quant.quantize"
EXPECT = "your scales carry bf16's rounding"


def quantize_kernel(x_ref, q_ref, scale_ref):
    x = x_ref[...]
    amax = jnp.max(jnp.abs(x), axis=1, keepdims=True)
    scale = jnp.where(amax > 0, amax / 127, 1.0)
    q = jnp.clip(jnp.round(x / scale), -127, 127)
    q_ref[...] = q.astype(q_ref.dtype)
    scale_ref[...] = scale.astype(scale_ref.dtype)
