"""basics.tiled: the index map returns an element offset (i * bm) instead of a block index."""
PUZZLE = "basics.tiled"
EXPECT = "BlockSpec index maps return block indices"


def add_one_tiled(x, *, bm=8):
    M, D = x.shape
    rows = pl.BlockSpec((bm, D), lambda i: (i * bm, 0))
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(M, bm),),
        in_specs=[rows],
        out_specs=rows,
    )(x)
