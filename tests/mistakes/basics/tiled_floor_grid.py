"""basics.tiled: grid=(M // bm,) has no step for the partial last block."""
PUZZLE = "basics.tiled"
EXPECT = "pl.cdiv(M, bm)"


def add_one_tiled(x, *, bm=8):
    M, D = x.shape
    rows = pl.BlockSpec((bm, D), lambda i: (i, 0))
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(M // bm,),
        in_specs=[rows],
        out_specs=rows,
    )(x)
