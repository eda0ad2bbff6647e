"""basics.grid_2d: (bm, 64) tiles: right values in interpret mode, but no TPU takes
a block whose last dim is not a multiple of 128."""
PUZZLE = "basics.grid_2d"
EXPECT = "multiples of (8, 128)"


def add_2d(x, y, *, bm=8, bn=128):
    M, N = x.shape
    tile = pl.BlockSpec((bm, 64), lambda i, j: (i, j))
    return pl.pallas_call(
        add_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, 64)),
        in_specs=[tile, tile],
        out_specs=tile,
    )(x, y)
