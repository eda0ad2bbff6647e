"""norms.row_softmax: the block is never cast to float32: for bf16 rows the exponentials
are bf16, their sum is rounded back to bf16, and the division rounds again. Every value
is within 1% (the value check passes), but not the exact softmax rounded once."""
PUZZLE = "norms.row_softmax"
EXPECT = "your bf16 output was rounded more than once"


def softmax_rows_kernel(x_ref, o_ref):
    x = x_ref[...]
    m = jnp.max(x, axis=1, keepdims=True)
    e = jnp.exp(x - m)
    o_ref[...] = (e / jnp.sum(e, axis=1, keepdims=True)).astype(o_ref.dtype)
