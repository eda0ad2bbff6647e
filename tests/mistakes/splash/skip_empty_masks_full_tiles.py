"""splash.skip_empty: every visited tile is folded under its mask, full tiles too (the
mask of a full tile is all True: the values are right, the work of masking is wasted)."""
PUZZLE = "splash.skip_empty"
EXPECT = "your kernel reads the mask on full tiles too"


def block_mask_kernel(categories_ref, q_ref, k_ref, v_ref, mask_ref, o_ref, m_scratch,
                      l_scratch, acc_scratch, *, sm_scale):
    i, kv = pl.program_id(2), pl.program_id(3)
    category = categories_ref[i, kv]

    @pl.when(kv == 0)
    def start_q_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)
        acc_scratch[...] = jnp.zeros_like(acc_scratch)

    @pl.when(category != EMPTY)
    def fold_block():
        s = jnp.einsum("qh,kh->qk", q_ref[...], k_ref[...],
                       preferred_element_type=jnp.float32) * sm_scale
        m, l, acc = online_softmax_step(m_scratch[...], l_scratch[...], acc_scratch[...],
                                        s, v_ref[...], mask_ref[...])
        m_scratch[...] = m
        l_scratch[...] = l
        acc_scratch[...] = acc

    @pl.when(kv == pl.num_programs(3) - 1)
    def finish_q_block():
        o_ref[...] = (acc_scratch[...] / l_scratch[...]).astype(o_ref.dtype)
