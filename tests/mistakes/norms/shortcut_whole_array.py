"""norms.row_softmax (shortcut): every row in one kernel step, no grid."""
PUZZLE = "norms.row_softmax"
EXPECT = "not the whole array in one step"


def softmax_rows(x, *, block_rows=8):
    return pl.pallas_call(softmax_rows_kernel,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
