"""norms.long_rows (red team, issue 32): the online softmax skipped. The first pass
sums exp(x) with no max subtracted and no rescaling, right only while no logit
overflows; a running max is kept in m_scratch, unused, so the kernel still takes a max."""
PUZZLE = "norms.long_rows"
EXPECT = "Is each exp taken of x minus the running max"


def softmax_long_kernel(x_ref, o_ref, m_scratch, l_scratch, *, C):
    phase, j = pl.program_id(1), pl.program_id(2)
    block_cols = x_ref.shape[1]
    col = j * block_cols + jax.lax.broadcasted_iota(jnp.int32, x_ref.shape, 1)
    x = jnp.where(col < C, x_ref[...].astype(jnp.float32), -jnp.inf)

    @pl.when((phase == 0) & (j == 0))
    def start_row_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)

    @pl.when(phase == 0)
    def fold_column_block():
        m_scratch[...] = jnp.maximum(m_scratch[...], jnp.max(x, axis=1, keepdims=True))
        l_scratch[...] += jnp.sum(jnp.exp(x), axis=1, keepdims=True)

    @pl.when(phase == 1)
    def write_column_block():
        o_ref[...] = (jnp.exp(x) / l_scratch[...]).astype(o_ref.dtype)
