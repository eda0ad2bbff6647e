"""flash.logsumexp: masks the padding with col <= kv_len, so key kv_len gets weight."""
PUZZLE = "flash.logsumexp"
EXPECT = "so the mask is col < kv_len, not <="


def flash_fwd_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, m_scratch, l_scratch, acc_scratch,
                     *, sm_scale, causal, kv_len):
    i, kv = pl.program_id(2), pl.program_id(3)
    block_q, block_kv = q_ref.shape[0], k_ref.shape[0]

    @pl.when(kv == 0)
    def start_q_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)
        acc_scratch[...] = jnp.zeros_like(acc_scratch)

    needed = kv * block_kv <= (i + 1) * block_q - 1 if causal else True

    @pl.when(needed)
    def fold_kv_block():
        s = jnp.einsum("qh,kh->qk", q_ref[...], k_ref[...],
                       preferred_element_type=jnp.float32) * sm_scale
        if causal or kv_len is not None:
            row = i * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            col = kv * block_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            visible = (col <= row) if causal else True
            if kv_len is not None:  # keys past kv_len are padding
                visible = jnp.logical_and(visible, col <= kv_len)
            s = jnp.where(visible, s, MASK_VALUE)
        m, l, acc = online_softmax_step(m_scratch[...], l_scratch[...], acc_scratch[...],
                                        s, v_ref[...])
        m_scratch[...] = m
        l_scratch[...] = l
        acc_scratch[...] = acc

    @pl.when(kv == pl.num_programs(3) - 1)
    def finish_q_block():
        l = l_scratch[...]
        o_ref[...] = (acc_scratch[...] / l).astype(o_ref.dtype)
        lse_ref[...] = m_scratch[...] + jnp.log(l)
