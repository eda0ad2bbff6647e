"""norms.softmax_grad: s is kept in a float32 scratch, but y and dy are never cast: the
products dy * y and their row sum are bf16, and so is dy - s. When dy has a large part
common to the row (which the softmax backward cancels: dx does not depend on it), s is
that large part plus a small one, and bf16 keeps only its top bits."""
PUZZLE = "norms.softmax_grad"
EXPECT = "s_scratch is float32, but its update is computed in bfloat16"


def softmax_backward_kernel(y_ref, dy_ref, dx_ref, s_scratch, *, C):
    phase, j = pl.program_id(1), pl.program_id(2)
    block_cols = y_ref.shape[1]
    col = j * block_cols + jax.lax.broadcasted_iota(jnp.int32, y_ref.shape, 1)
    y, dy = y_ref[...], dy_ref[...]            # bf16 for bf16 inputs

    @pl.when((phase == 0) & (j == 0))
    def start_row_block():
        s_scratch[...] = jnp.zeros_like(s_scratch)

    @pl.when(phase == 0)
    def accumulate():
        share = jnp.sum(jnp.where(col < C, dy * y, 0), axis=1, keepdims=True)
        s_scratch[...] += share.astype(jnp.float32)

    @pl.when(phase == 1)
    def write_column_block():
        dx_ref[...] = (y * (dy - s_scratch[...].astype(dy.dtype))).astype(dx_ref.dtype)
