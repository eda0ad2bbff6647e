"""matmul.k_accumulate (shortcut): puzzle 1's one-block kernel, no grid at all."""
PUZZLE = "matmul.k_accumulate"
EXPECT = "runs once, over the whole array"


def matmul_tiled(a, b, *, bm=128, bk=128, bn=128):
    return matmul_one_block(a, b)
