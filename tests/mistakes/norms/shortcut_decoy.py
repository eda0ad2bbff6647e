"""norms.long_rows (shortcut): a real kernel runs; the result comes from jax.nn.softmax."""
PUZZLE = "norms.long_rows"
EXPECT = "is never used"


def softmax_long(x, *, block_rows=8, block_cols=128):
    softmax_rows(x, block_rows=block_rows)
    return jax.nn.softmax(x.astype(jnp.float32), axis=-1).astype(x.dtype)
