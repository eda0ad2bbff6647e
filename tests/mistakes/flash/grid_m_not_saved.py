"""m_scratch never written back (only l and acc): the running max stays -inf; should point at the missing m store."""
PUZZLE = "flash.grid"
EXPECT = 'a statistic never written back after a step'


def flash_kernel(q_ref, k_ref, v_ref, o_ref, m_scratch, l_scratch, acc_scratch, *, sm_scale):
    kv = pl.program_id(3)

    @pl.when(kv == 0)
    def start_q_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)
        acc_scratch[...] = jnp.zeros_like(acc_scratch)

    s = jnp.einsum("qh,kh->qk", q_ref[...], k_ref[...],
                   preferred_element_type=jnp.float32) * sm_scale
    m, l, acc = online_softmax_step(m_scratch[...], l_scratch[...], acc_scratch[...],
                                    s, v_ref[...])
    l_scratch[...] = l
    acc_scratch[...] = acc

    @pl.when(kv == pl.num_programs(3) - 1)
    def finish_q_block():
        o_ref[...] = (acc_scratch[...] / l_scratch[...]).astype(o_ref.dtype)
