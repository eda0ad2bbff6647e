"""norms.softmax_grad: s is zeroed under pl.when(j == 0), which fires in both passes:
the second pass wipes the sum before using it. The row term is in the code."""
PUZZLE = "norms.softmax_grad"
EXPECT = "runs at j == 0 of both passes"
AVOID = "Does dx subtract it"


def softmax_backward_kernel(y_ref, dy_ref, dx_ref, s_scratch, *, C):
    phase, j = pl.program_id(1), pl.program_id(2)
    block_cols = y_ref.shape[1]
    col = j * block_cols + jax.lax.broadcasted_iota(jnp.int32, y_ref.shape, 1)
    y = y_ref[...].astype(jnp.float32)
    dy = dy_ref[...].astype(jnp.float32)

    @pl.when(j == 0)
    def start_row_block():
        s_scratch[...] = jnp.zeros_like(s_scratch)

    @pl.when(phase == 0)
    def accumulate():
        s_scratch[...] += jnp.sum(jnp.where(col < C, dy * y, 0.0), axis=1, keepdims=True)

    @pl.when(phase == 1)
    def write_column_block():
        dx_ref[...] = (y * (dy - s_scratch[...])).astype(dx_ref.dtype)
