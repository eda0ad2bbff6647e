"""basics.tiled: the index map returns one block index for a 2-D block."""
PUZZLE = "basics.tiled"
EXPECT = "must return 2 block indices, one per dim of its block, but returns 1"


def add_one_tiled(x, *, bm=8):
    M, D = x.shape
    rows = pl.BlockSpec((bm, D), lambda i: (i,))
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(M, bm),),
        in_specs=[rows],
        out_specs=rows,
    )(x)
