"""flash.causal: the global row index is built from block_kv, i * block_kv + iota: the first q block is right, the later ones not (nothing is carried between q blocks)."""
PUZZLE = "flash.causal"
EXPECT = "Does the row index start at i * block_q"
AVOID = "what one step hands to the next"

def causal_kernel(q_ref, k_ref, v_ref, o_ref, m_scratch, l_scratch, acc_scratch, *, sm_scale):
    i, kv = pl.program_id(2), pl.program_id(3)
    block_q, block_kv = q_ref.shape[0], k_ref.shape[0]
    @pl.when(kv == 0)
    def start_q_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)
        acc_scratch[...] = jnp.zeros_like(acc_scratch)
    @pl.when(kv * block_kv <= (i + 1) * block_q - 1)
    def fold_kv_block():
        s = jnp.einsum("qh,kh->qk", q_ref[...], k_ref[...], preferred_element_type=jnp.float32) * sm_scale
        row = i * block_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
        col = kv * block_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where(col <= row, s, MASK_VALUE)
        m, l, acc = online_softmax_step(m_scratch[...], l_scratch[...], acc_scratch[...], s, v_ref[...])
        m_scratch[...] = m
        l_scratch[...] = l
        acc_scratch[...] = acc
    @pl.when(kv == pl.num_programs(3) - 1)
    def finish_q_block():
        o_ref[...] = (acc_scratch[...] / l_scratch[...]).astype(o_ref.dtype)

