"""splash.skip_empty: block_mask_kernel: the running state reset at every kv step (the pl.when(kv == 0) dropped)."""
PUZZLE = "splash.skip_empty"
EXPECT = "only the last kv tile of each row counts"


def block_mask_kernel(categories_ref, q_ref, k_ref, v_ref, mask_ref, o_ref, m_scratch,
                      l_scratch, acc_scratch, *, sm_scale):
    i, kv = pl.program_id(2), pl.program_id(3)
    category = categories_ref[i, kv]

    m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
    l_scratch[...] = jnp.zeros_like(l_scratch)
    acc_scratch[...] = jnp.zeros_like(acc_scratch)

    def fold(visible):
        s = jnp.einsum("qh,kh->qk", q_ref[...], k_ref[...],
                       preferred_element_type=jnp.float32) * sm_scale
        m, l, acc = online_softmax_step(m_scratch[...], l_scratch[...], acc_scratch[...],
                                        s, v_ref[...], visible)
        m_scratch[...] = m
        l_scratch[...] = l
        acc_scratch[...] = acc

    @pl.when(category == FULL)
    def fold_full_block():          # every key visible: no mask to apply
        fold(None)

    @pl.when(category == PARTIAL)
    def fold_partial_block():       # some keys visible: the mask decides which
        fold(mask_ref[...])

    @pl.when(kv == pl.num_programs(3) - 1)
    def finish_q_block():
        o_ref[...] = (acc_scratch[...] / l_scratch[...]).astype(o_ref.dtype)
