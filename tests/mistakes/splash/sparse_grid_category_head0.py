"""splash.sparse_grid: splash_kernel: the category read as block_mask_ref[0, i, j] (head 0's table for every head)."""
PUZZLE = "splash.sparse_grid"
EXPECT = "every head followed head 0's categories"


def splash_kernel(data_next_ref, block_mask_ref, mask_next_ref, q_ref, k_ref, v_ref, mask_ref,
                  o_ref, m_scratch, l_scratch, acc_scratch, *, sm_scale):
    n, i, j = pl.program_id(1), pl.program_id(2), pl.program_id(3)
    category = block_mask_ref[0, i, j]

    @pl.when(j == 0)
    def start_q_block():
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
    def fold_full_block():
        fold(None)

    @pl.when(category == PARTIAL)
    def fold_partial_block():
        fold(mask_ref[...])

    @pl.when(j == pl.num_programs(3) - 1)
    def finish_q_block():
        l = l_scratch[...]
        # A row that sees no key has l == 0 (and acc == 0): it outputs 0, not 0 / 0.
        o_ref[...] = (acc_scratch[...] / jnp.where(l == 0, 1, l)).astype(o_ref.dtype)
