"""flash.gqa: dK and dV restart at every query head g of the group: only the last head
of each group reaches them."""
PUZZLE = "flash.gqa"
EXPECT = "Zero them only when g == 0 and i == 0"


def flash_dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref,
                     dk_scratch, dv_scratch, *, sm_scale, causal, kv_len):
    kv, g, i = pl.program_id(2), pl.program_id(3), pl.program_id(4)
    block_q, block_kv = q_ref.shape[0], k_ref.shape[0]

    @pl.when(i == 0)
    def start_kv_block():
        dk_scratch[...] = jnp.zeros_like(dk_scratch)
        dv_scratch[...] = jnp.zeros_like(dv_scratch)

    needed = kv * block_kv <= (i + 1) * block_q - 1 if causal else True

    @pl.when(needed)
    def accumulate():
        q, k, v, do = q_ref[...], k_ref[...], v_ref[...], do_ref[...]
        s = jnp.einsum("qh,kh->qk", q, k, preferred_element_type=jnp.float32) * sm_scale
        if causal or kv_len is not None:
            row = i * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            col = kv * block_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            visible = (col <= row) if causal else True
            if kv_len is not None:
                visible = jnp.logical_and(visible, col < kv_len)
            s = jnp.where(visible, s, MASK_VALUE)
        p = jnp.exp(s - lse_ref[...])
        dv_scratch[...] += jnp.dot(p.astype(do.dtype).T, do, preferred_element_type=jnp.float32)
        dp = jnp.einsum("qh,kh->qk", do, v, preferred_element_type=jnp.float32)
        ds = p * (dp - delta_ref[...])
        dk_scratch[...] += jnp.dot(ds.astype(q.dtype).T, q,
                                   preferred_element_type=jnp.float32) * sm_scale

    @pl.when((g == pl.num_programs(3) - 1) & (i == pl.num_programs(4) - 1))
    def finish_kv_block():
        dk_ref[...] = dk_scratch[...].astype(dk_ref.dtype)
        dv_ref[...] = dv_scratch[...].astype(dv_ref.dtype)
