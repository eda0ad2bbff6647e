"""norms.softmax_grad: dx = y * dy, the row term s = sum(dy * y) forgotten."""
PUZZLE = "norms.softmax_grad"
EXPECT = "Does dx subtract it, dx = y * (dy - s)?"


def softmax_backward_kernel(y_ref, dy_ref, dx_ref, s_scratch, *, C):
    phase = pl.program_id(1)

    @pl.when(phase == 1)
    def write_column_block():
        y = y_ref[...].astype(jnp.float32)
        dx_ref[...] = (y * dy_ref[...].astype(jnp.float32)).astype(dx_ref.dtype)
