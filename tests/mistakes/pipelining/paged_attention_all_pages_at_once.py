"""pipelining.paged_attention: every page of a sequence fetched up front, into slots for
all of its blocks, then the blocks attended one by one (the whole sequence in VMEM)."""
PUZZLE = "pipelining.paged_attention"
EXPECT = "never all fetched up front"


def paged_attention_kernel(lengths_ref, page_indices_ref, q_ref, k_hbm, v_hbm, o_ref,
                           k_vmem, v_vmem, sems, *, pages_per_block, pages_per_sequence):
    b, h = pl.program_id(0), pl.program_id(1)
    page_size = k_vmem.shape[2]
    tokens_per_block = pages_per_block * page_size
    length = lengths_ref[b]
    num_blocks = pl.cdiv(length, tokens_per_block)
    blocks = pages_per_sequence // pages_per_block

    def everything(k_all, v_all, all_sems):
        def each_page(action):
            for p in range(pages_per_sequence):
                @pl.when(p * page_size < length)
                def page_holds_a_token():
                    page = page_indices_ref[b * pages_per_sequence + p]
                    for pages_hbm, pages_vmem in ((k_hbm, k_all), (v_hbm, v_all)):
                        action(pltpu.make_async_copy(pages_hbm.at[h, page],
                                                     pages_vmem.at[p], all_sems.at[p]))

        each_page(lambda copy: copy.start())
        each_page(lambda copy: copy.wait())
        q = q_ref[...].astype(jnp.float32)

        def attend_block(block, carry):
            m, l, acc = carry
            k = k_all[pl.ds(block * pages_per_block, pages_per_block)].reshape(
                tokens_per_block, -1).astype(jnp.float32)
            v = v_all[pl.ds(block * pages_per_block, pages_per_block)].reshape(
                tokens_per_block, -1).astype(jnp.float32)
            token = block * tokens_per_block + lax.broadcasted_iota(
                jnp.int32, (1, tokens_per_block), 1)
            visible = token < length
            s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), precision=lax.Precision.HIGHEST,
                                preferred_element_type=jnp.float32)
            s = jnp.where(visible, s, -jnp.inf)
            m_new = jnp.maximum(m, s.max(axis=1, keepdims=True))
            alpha, p = jnp.exp(m - m_new), jnp.exp(s - m_new)
            v = jnp.where(visible.reshape(tokens_per_block, 1), v, 0.0)
            pv = jnp.dot(p, v, precision=lax.Precision.HIGHEST,
                         preferred_element_type=jnp.float32)
            return m_new, alpha * l + p.sum(axis=1, keepdims=True), alpha * acc + pv

        G, H = q.shape
        start = (jnp.full((G, 1), -jnp.inf, jnp.float32), jnp.zeros((G, 1), jnp.float32),
                 jnp.zeros((G, H), jnp.float32))
        _, l, acc = lax.fori_loop(0, num_blocks, attend_block, start)
        o_ref[...] = jnp.where(l > 0, acc / l, 0.0).astype(o_ref.dtype)

    shape = (pages_per_sequence,) + k_vmem.shape[2:]
    pl.run_scoped(everything, pltpu.VMEM(shape, k_vmem.dtype), pltpu.VMEM(shape, v_vmem.dtype),
                  pltpu.SemaphoreType.DMA((pages_per_sequence,)))
    del blocks
