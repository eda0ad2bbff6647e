"""basics.reverse: mirrors block i to n - i, one past the last block."""
PUZZLE = "basics.reverse"
EXPECT = "n - 1 - i"


def reverse_blocks(x, *, bm=8):
    M, D = x.shape
    n = M // bm
    return pl.pallas_call(
        copy_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(n,),
        in_specs=[pl.BlockSpec((bm, D), lambda i: (n - i, 0))],
        out_specs=pl.BlockSpec((bm, D), lambda i: (i, 0)),
    )(x)
