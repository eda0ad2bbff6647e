"""norms.long_rows: m and l live in float32 scratch, but each block is read as bfloat16:
its exponentials, and its share of l (jnp.sum sums in float32, then rounds back to the
input's dtype), are rounded to bf16 before they join the float32 sum. Each share is off
by up to 0.4%: within the value check, and the program shows the bf16 arithmetic
that feeds the float32 sum."""
PUZZLE = "norms.long_rows"
EXPECT = "l_scratch is float32, but its update is computed in bfloat16"


def softmax_long_kernel(x_ref, o_ref, m_scratch, l_scratch, *, C):
    phase, j = pl.program_id(1), pl.program_id(2)
    block_cols = x_ref.shape[1]
    col = j * block_cols + jax.lax.broadcasted_iota(jnp.int32, x_ref.shape, 1)
    x = jnp.where(col < C, x_ref[...], -jnp.inf)      # bf16 for bf16 rows

    @pl.when((phase == 0) & (j == 0))
    def start_row_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)

    @pl.when(phase == 0)
    def fold_column_block():
        m = m_scratch[...]
        m_new = jnp.maximum(m, jnp.max(x, axis=1, keepdims=True).astype(jnp.float32))
        share = jnp.sum(jnp.exp(x - m_new.astype(x.dtype)), axis=1, keepdims=True)
        l_scratch[...] = jnp.exp(m - m_new) * l_scratch[...] + share.astype(jnp.float32)
        m_scratch[...] = m_new

    @pl.when(phase == 1)
    def write_column_block():
        o_ref[...] = (jnp.exp(x.astype(jnp.float32) - m_scratch[...])
                      / l_scratch[...]).astype(o_ref.dtype)
