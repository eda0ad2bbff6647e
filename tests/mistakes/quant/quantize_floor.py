"""Slip: jnp.floor instead of jnp.round; diagnosis should say q is rounded down, not to nearest."""
PUZZLE = "quant.quantize"
EXPECT = 'off by exactly 1 where they differ'


def quantize_kernel(x_ref, q_ref, scale_ref):
    x = x_ref[...].astype(jnp.float32)
    amax = jnp.max(jnp.abs(x), axis=1, keepdims=True)
    scale = jnp.where(amax > 0, amax / 127, 1.0)
    q = jnp.clip(jnp.floor(x / scale), -127, 127)
    q_ref[...] = q.astype(q_ref.dtype)
    scale_ref[...] = scale
