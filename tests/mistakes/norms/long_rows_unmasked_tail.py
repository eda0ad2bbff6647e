"""norms.long_rows: the garbage columns past C in the last column block enter the max
and the sum (NaN in interpret mode)."""
PUZZLE = "norms.long_rows"
EXPECT = "Are the columns past C in the last column block given -inf"


def softmax_long_kernel(x_ref, o_ref, m_scratch, l_scratch, *, C):
    phase, j = pl.program_id(1), pl.program_id(2)
    x = x_ref[...].astype(jnp.float32)

    @pl.when((phase == 0) & (j == 0))
    def start_row_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)

    @pl.when(phase == 0)
    def fold_column_block():
        m = m_scratch[...]
        m_new = jnp.maximum(m, jnp.max(x, axis=1, keepdims=True))
        l_scratch[...] = (jnp.exp(m - m_new) * l_scratch[...]
                          + jnp.sum(jnp.exp(x - m_new), axis=1, keepdims=True))
        m_scratch[...] = m_new

    @pl.when(phase == 1)
    def write_column_block():
        o_ref[...] = (jnp.exp(x - m_scratch[...]) / l_scratch[...]).astype(o_ref.dtype)
