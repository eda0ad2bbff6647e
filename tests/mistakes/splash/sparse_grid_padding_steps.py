"""splash.sparse_grid: the scores and the fold computed at every step of the list,
padding steps included, and only the state of a visited step kept (jnp.where on the
category): the values are right, the dots of the padding steps are work for nothing."""
PUZZLE = "splash.sparse_grid"
EXPECT = "your kernel computed the padding steps too"


def splash_kernel(data_next_ref, block_mask_ref, mask_next_ref, q_ref, k_ref, v_ref, mask_ref,
                  o_ref, m_scratch, l_scratch, acc_scratch, *, sm_scale):
    n, i, j = pl.program_id(1), pl.program_id(2), pl.program_id(3)
    category = block_mask_ref[n, i, j]

    @pl.when(j == 0)
    def start_q_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)
        acc_scratch[...] = jnp.zeros_like(acc_scratch)

    s = jnp.einsum("qh,kh->qk", q_ref[...], k_ref[...],
                   preferred_element_type=jnp.float32) * sm_scale
    visible = (category == FULL) | mask_ref[...]
    m, l, acc = online_softmax_step(m_scratch[...], l_scratch[...], acc_scratch[...],
                                    s, v_ref[...], visible)
    keep = category != EMPTY
    m_scratch[...] = jnp.where(keep, m, m_scratch[...])
    l_scratch[...] = jnp.where(keep, l, l_scratch[...])
    acc_scratch[...] = jnp.where(keep, acc, acc_scratch[...])

    @pl.when(j == pl.num_programs(3) - 1)
    def finish_q_block():
        l = l_scratch[...]
        o_ref[...] = (acc_scratch[...] / jnp.where(l == 0, 1, l)).astype(o_ref.dtype)
