"""basics.tiled (shortcut): the whole array in one grid step: right values, no grid."""
PUZZLE = "basics.tiled"
EXPECT = "this puzzle is about the grid"


def add_one_tiled(x, *, bm=8):
    return pl.pallas_call(add_one_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
