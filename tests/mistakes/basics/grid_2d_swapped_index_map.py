"""basics.grid_2d: the index map returns (j, i) for a grid over (i, j)."""
PUZZLE = "basics.grid_2d"
EXPECT = "That is the grid step reversed"


def add_2d(x, y, *, bm=8, bn=128):
    M, N = x.shape
    tile = pl.BlockSpec((bm, bn), lambda i, j: (j, i))
    return pl.pallas_call(
        add_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn)),
        in_specs=[tile, tile],
        out_specs=tile,
    )(x, y)
