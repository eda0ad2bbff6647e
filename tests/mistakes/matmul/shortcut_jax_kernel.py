"""matmul.k_accumulate (shortcut): JAX's own Pallas matmul, with the puzzle's blocks."""
PUZZLE = "matmul.k_accumulate"
EXPECT = "is not yours"

from jax.experimental.pallas.ops.tpu import matmul as jax_matmul  # noqa: E402


def matmul_tiled(a, b, *, bm=128, bk=128, bn=128):
    return jax_matmul.matmul(a, b, block_shape=(bm, bn), block_k=bk)
