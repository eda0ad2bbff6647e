"""norms.row_softmax: the max is taken over axis 0, across the rows of the block: NaN
from 0 / 0 and from the last block's garbage rows, though a max is subtracted."""
PUZZLE = "norms.row_softmax"
EXPECT = "your max is taken over another axis than the row's"
AVOID = "exp overflowed"


def softmax_rows_kernel(x_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    m = jnp.max(x, axis=0, keepdims=True)
    e = jnp.exp(x - m)
    o_ref[...] = (e / jnp.sum(e, axis=1, keepdims=True)).astype(o_ref.dtype)
