"""flash.grid (shortcut): JAX's own Pallas flash attention stands in."""
PUZZLE = "flash.grid"
EXPECT = "is not yours"

from jax.experimental.pallas.ops.tpu import flash_attention as jax_flash  # noqa: E402


def flash_grid(q, k, v, *, sm_scale=None, block_q=128, block_kv=128):
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    return jax_flash.flash_attention(q, k, v, sm_scale=scale)
