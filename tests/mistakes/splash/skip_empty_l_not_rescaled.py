"""splash.skip_empty: the online softmax written out by hand, with the running sum l
never converted to the new max (l + sum(p) instead of alpha * l + sum(p))."""
PUZZLE = "splash.skip_empty"
EXPECT = "your running sum l is not converted when the max moves"


def block_mask_kernel(categories_ref, q_ref, k_ref, v_ref, mask_ref, o_ref, m_scratch,
                      l_scratch, acc_scratch, *, sm_scale):
    i, kv = pl.program_id(2), pl.program_id(3)
    category = categories_ref[i, kv]

    @pl.when(kv == 0)
    def start_q_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)
        acc_scratch[...] = jnp.zeros_like(acc_scratch)

    def fold(visible):
        s = jnp.einsum("qh,kh->qk", q_ref[...], k_ref[...],
                       preferred_element_type=jnp.float32) * sm_scale
        if visible is not None:
            s = jnp.where(visible, s, MASK_VALUE)
        m = m_scratch[...]
        m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
        alpha = jnp.exp(m - m_new)
        p = jnp.exp(s - m_new)
        if visible is not None:
            p = jnp.where(visible, p, 0.0)
        l_scratch[...] = l_scratch[...] + jnp.sum(p, axis=-1, keepdims=True)
        acc_scratch[...] = alpha * acc_scratch[...] + jnp.dot(
            p.astype(v_ref.dtype), v_ref[...], preferred_element_type=jnp.float32)
        m_scratch[...] = m_new

    @pl.when(category == FULL)
    def fold_full_block():
        fold(None)

    @pl.when(category == PARTIAL)
    def fold_partial_block():
        fold(mask_ref[...])

    @pl.when(kv == pl.num_programs(3) - 1)
    def finish_q_block():
        o_ref[...] = (acc_scratch[...] / l_scratch[...]).astype(o_ref.dtype)
