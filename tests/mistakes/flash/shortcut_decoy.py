"""flash.causal (shortcut): a real kernel runs; the result comes from plain JAX."""
PUZZLE = "flash.causal"
EXPECT = "is never used"


def flash_causal(q, k, v, *, sm_scale=None, block_q=128, block_kv=128):
    flash_grid(q, k, v, sm_scale=sm_scale, block_q=block_q, block_kv=block_kv)
    return attention(q, k, v, causal=True, sm_scale=sm_scale)
