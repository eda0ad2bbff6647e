"""flash.grid: m, l and acc are never reset at kv == 0: the fold reads garbage scratch."""
PUZZLE = "flash.grid"
EXPECT = "under @pl.when(pl.program_id(3) == 0)"


def flash_kernel(q_ref, k_ref, v_ref, o_ref, m_scratch, l_scratch, acc_scratch, *, sm_scale):
    kv = pl.program_id(3)
    s = jnp.einsum("qh,kh->qk", q_ref[...], k_ref[...],
                   preferred_element_type=jnp.float32) * sm_scale
    m, l, acc = online_softmax_step(m_scratch[...], l_scratch[...], acc_scratch[...],
                                    s, v_ref[...])
    m_scratch[...] = m
    l_scratch[...] = l
    acc_scratch[...] = acc

    @pl.when(kv == pl.num_programs(3) - 1)
    def finish_q_block():
        o_ref[...] = (acc_scratch[...] / l_scratch[...]).astype(o_ref.dtype)
