"""hopper attention: p @ v is computed on the CUDA cores (broadcast multiply over the
KV block, float32, p never rounded to 16 bits); the second wgmma still runs on p_tile as
a decoy mixed in at 1%. Dodges 'both products on the tensor core (p stored to an SMEM
tile first)'."""
PUZZLE = "hopper.attention"
EXPECT = "in a pattern that is a matrix product"


def attention_kernel(q_ref, k_ref, v_ref, o_ref, q_tile, p_tile, o_tile, landed, *,
                     causal, block_q, block_kv, sm_scale):
    N, K = q_ref.shape[1], k_ref.shape[1]
    S, H = k_ref.shape[2], k_ref.shape[3]
    b, n, qi = lax.axis_index("b"), lax.axis_index("n"), lax.axis_index("q")
    rows = pl.ds(qi * block_q, block_q)
    kv_head = n // (N // K)
    transforms = wgmma_transforms(H, q_ref.dtype)

    plgpu.copy_gmem_to_smem(q_ref.at[b, n, rows], q_tile, landed)
    plgpu.barrier_wait(landed)

    def kv_step(indices, k_tile, v_tile, carry):
        acc, m, l = carry
        (j,) = indices

        def scores(s_acc):
            plgpu.wgmma(s_acc, q_tile, k_tile.T)
            return s_acc[...]

        s = pl.run_scoped(scores, plgpu.ACC((block_q, block_kv), jnp.float32)) * sm_scale
        if causal:
            q_pos = qi * block_q + plgpu.broadcasted_iota(
                jnp.int32, s.shape, 0, layout=plgpu.Layout.WGMMA)
            k_pos = j * block_kv + plgpu.broadcasted_iota(
                jnp.int32, s.shape, 1, layout=plgpu.Layout.WGMMA)
            s = jnp.where(k_pos <= q_pos, s, -jnp.inf)
        m_new = jnp.maximum(m, s.max(axis=1))
        alpha = jnp.exp(m - m_new)
        p = jnp.exp(s - lax.broadcast_in_dim(m_new, s.shape, [0]))
        l = l * alpha + p.sum(axis=1)
        p_tile[...] = p.astype(p_tile.dtype)
        plgpu.commit_smem()

        def values(pv_acc):
            plgpu.wgmma(pv_acc, p_tile, v_tile)
            return pv_acc[...]

        pv_mxu = pl.run_scoped(values, plgpu.ACC((block_q, H), jnp.float32))
        pv_cores = jnp.sum(p[:, :, None] * v_tile[...].astype(jnp.float32)[None, :, :], axis=1)
        pv = 0.99 * pv_cores + 0.01 * pv_mxu
        plgpu.commit_smem()   # done with the plain reads of v_tile
        return acc * lax.broadcast_in_dim(alpha, acc.shape, [0]) + pv, m_new, l

    if causal:
        steps = jnp.minimum(S // block_kv, pl.cdiv((qi + 1) * block_q, block_kv))
    else:
        steps = S // block_kv
    rows_layout = plgpu.Layout.WGMMA.reduce(1)
    init = (plgpu.layout_cast(jnp.zeros((block_q, H), jnp.float32), plgpu.Layout.WGMMA),
            plgpu.layout_cast(jnp.full((block_q,), -jnp.inf, jnp.float32), rows_layout),
            plgpu.layout_cast(jnp.zeros((block_q,), jnp.float32), rows_layout))
    acc, m, l = plgpu.emit_pipeline(
        kv_step,
        grid=(steps,),
        in_specs=[plgpu.BlockSpec((block_kv, H), lambda j: (j, 0), transforms=transforms),
                  plgpu.BlockSpec((block_kv, H), lambda j: (j, 0), transforms=transforms)],
        max_concurrent_steps=2,
        init_carry=init,
    )(k_ref.at[b, kv_head], v_ref.at[b, kv_head])
    o_tile[...] = (acc / lax.broadcast_in_dim(l, acc.shape, [0])).astype(o_tile.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_tile, o_ref.at[b, n, rows])
    plgpu.wait_smem_to_gmem(0)
