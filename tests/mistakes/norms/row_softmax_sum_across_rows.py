"""norms.row_softmax: the row max is right, but the sum divides by is taken over axis 0,
across the rows of the block: NaN (0 / 0) with no exp overflowing."""
PUZZLE = "norms.row_softmax"
EXPECT = "your kernel takes a sum over another axis than the row's"
AVOID = "exp overflowed"


def softmax_rows_kernel(x_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)              # statistics in float32, whatever x is
    m = jnp.max(x, axis=1, keepdims=True)           # exp(x - m) <= 1: nothing overflows
    e = jnp.exp(x - m)
    o_ref[...] = (e / jnp.sum(e, axis=0, keepdims=True)).astype(o_ref.dtype)
