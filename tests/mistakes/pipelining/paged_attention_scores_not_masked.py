"""pipelining.paged_attention: the scores of tokens past the length are not masked (v's
rows are zeroed): NaN scores from unfetched pages reach the running max and sum."""
PUZZLE = "pipelining.paged_attention"
EXPECT = "Are the scores of tokens at or past the length masked to -inf"


def paged_attention_kernel(lengths_ref, page_indices_ref, q_ref, k_hbm, v_hbm, o_ref,
                           k_vmem, v_vmem, sems, *, pages_per_block, pages_per_sequence):
    b, h = pl.program_id(0), pl.program_id(1)
    page_size = k_vmem.shape[2]
    tokens_per_block = pages_per_block * page_size
    length = lengths_ref[b]
    num_blocks = pl.cdiv(length, tokens_per_block)   # blocks that hold a token

    def each_page(block, slot, action):
        """action(copy) for the K and V copies of every page of `block` that holds a
        token of this sequence: the pages past its length are never fetched (so a block
        past the last one starts nothing)."""
        for p in range(pages_per_block):
            @pl.when(block * tokens_per_block + p * page_size < length)
            def page_holds_a_token():
                page = page_indices_ref[b * pages_per_sequence + block * pages_per_block + p]
                for pages_hbm, pages_vmem in ((k_hbm, k_vmem), (v_hbm, v_vmem)):
                    action(pltpu.make_async_copy(pages_hbm.at[h, page],
                                                 pages_vmem.at[slot, p], sems.at[slot]))

    each_page(0, 0, lambda copy: copy.start())   # block 0, if the sequence has tokens

    q = q_ref[...].astype(jnp.float32)                       # (G, H): this K/V head's group

    def attend_block(block, carry):
        m, l, acc = carry
        slot = block % 2

        each_page(block + 1, 1 - slot, lambda copy: copy.start())   # lands during this one
        each_page(block, slot, lambda copy: copy.wait())
        k = k_vmem[slot].reshape(tokens_per_block, -1).astype(jnp.float32)
        v = v_vmem[slot].reshape(tokens_per_block, -1).astype(jnp.float32)
        token = block * tokens_per_block + lax.broadcasted_iota(
            jnp.int32, (1, tokens_per_block), 1)
        visible = token < length                             # (1, tokens_per_block)
        s = lax.dot_general(q, k, (((1,), (1,)), ((), ())),
                            precision=lax.Precision.HIGHEST,
                            preferred_element_type=jnp.float32)   # (G, tokens_per_block)
        m_new = jnp.maximum(m, s.max(axis=1, keepdims=True))
        alpha, p = jnp.exp(m - m_new), jnp.exp(s - m_new)
        # Pages past the length were not fetched: their rows hold an older block's
        # pages, or NaN. p is 0 there, but 0 * NaN is NaN: zero those rows of v.
        v = jnp.where(visible.reshape(tokens_per_block, 1), v, 0.0)
        pv = jnp.dot(p, v, precision=lax.Precision.HIGHEST,
                     preferred_element_type=jnp.float32)
        return m_new, alpha * l + p.sum(axis=1, keepdims=True), alpha * acc + pv

    G, H = q.shape
    start = (jnp.full((G, 1), -jnp.inf, jnp.float32), jnp.zeros((G, 1), jnp.float32),
             jnp.zeros((G, H), jnp.float32))
    _, l, acc = lax.fori_loop(0, num_blocks, attend_block, start)
    o_ref[...] = jnp.where(l > 0, acc / l, 0.0).astype(o_ref.dtype)   # length 0: zeros
