"""hopper.attention with the softmax in base 2, as JAX's attention_mgpu writes it: the
scores scaled by sm_scale * log2(e) and exponentiated with jnp.exp2 (2^(x log2 e) is
e^x), the running max kept in that scale; the causal mask from jnp.where on iotas
built by plgpu.broadcasted_iota, and the KV heads of a query head chosen with
lax.div."""
PUZZLE = "hopper.attention"


def _attention_exp2_kernel(q_ref, k_ref, v_ref, o_ref, q_tile, p_tile, o_tile, landed, *,
                           causal, block_q, block_kv, sm_scale):
    heads, kv_heads = q_ref.shape[1], k_ref.shape[1]
    S, H = k_ref.shape[2], k_ref.shape[3]
    b, n, qi = lax.axis_index("b"), lax.axis_index("n"), lax.axis_index("q")
    kv_head = lax.div(n, heads // kv_heads)
    q_rows = pl.ds(qi * block_q, block_q)
    scale = sm_scale * math.log2(math.e)
    layout = wgmma_transforms(H, q_ref.dtype)
    row_layout = plgpu.Layout.WGMMA.reduce(1)

    plgpu.copy_gmem_to_smem(q_ref.at[b, n, q_rows], q_tile, landed)
    plgpu.barrier_wait(landed)

    def step(indices, k_tile, v_tile, carry):
        (j,) = indices
        acc, m_prev, l_prev = carry

        def qk(s_ref):
            plgpu.wgmma(s_ref, q_tile, k_tile.T)
            return s_ref[...]

        s = pl.run_scoped(qk, plgpu.ACC((block_q, block_kv), jnp.float32)) * scale
        if causal:
            rows = plgpu.broadcasted_iota(jnp.int32, s.shape, 0, layout=plgpu.Layout.WGMMA)
            cols = plgpu.broadcasted_iota(jnp.int32, s.shape, 1, layout=plgpu.Layout.WGMMA)
            s = jnp.where(j * block_kv + cols <= qi * block_q + rows, s, -jnp.inf)
        m_next = jnp.maximum(m_prev, s.max(axis=1))
        correction = jnp.exp2(m_prev - m_next)
        p = jnp.exp2(s - lax.broadcast_in_dim(m_next, s.shape, [0]))
        l_next = correction * l_prev + p.sum(axis=1)
        p_tile[...] = p.astype(p_tile.dtype)
        plgpu.commit_smem()

        def pv(o_acc):
            plgpu.wgmma(o_acc, p_tile, v_tile)
            return o_acc[...]

        acc = lax.broadcast_in_dim(correction, acc.shape, [0]) * acc + pl.run_scoped(
            pv, plgpu.ACC((block_q, H), jnp.float32))
        return acc, m_next, l_next

    kv_steps = S // block_kv
    if causal:
        kv_steps = jnp.minimum(kv_steps, ((qi + 1) * block_q + block_kv - 1) // block_kv)
    acc, _, l = plgpu.emit_pipeline(
        step,
        grid=(kv_steps,),
        in_specs=[plgpu.BlockSpec((block_kv, H), lambda j: (j, 0), transforms=layout)] * 2,
        max_concurrent_steps=2,
        init_carry=(
            plgpu.layout_cast(jnp.zeros((block_q, H), jnp.float32), plgpu.Layout.WGMMA),
            plgpu.layout_cast(jnp.full((block_q,), -jnp.inf, jnp.float32), row_layout),
            plgpu.layout_cast(jnp.zeros((block_q,), jnp.float32), row_layout)),
    )(k_ref.at[b, kv_head], v_ref.at[b, kv_head])
    o_tile[...] = (acc / lax.broadcast_in_dim(l, acc.shape, [0])).astype(o_tile.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_tile, o_ref.at[b, n, q_rows])
    plgpu.wait_smem_to_gmem(0)


def attention(q, k, v, *, causal=False, block_q=64, block_kv=64):
    B, N, T, H = q.shape
    _, K, S, _ = k.shape
    if k.shape[0] != B or k.shape[3] != H or v.shape != k.shape or N % K:
        raise ValueError(f"attention: q [B, N, T, H] = {q.shape}, k and v [B, K, S, H] = "
                         f"{k.shape} and {v.shape}: B and H must agree, K must divide N")
    _check_16_bit("attention", q, k, v)
    for argument, block, size, dim in (("block_q", block_q, T, "T"),
                                       ("block_kv", block_kv, S, "S")):
        if block % 64:
            raise ValueError(f"attention: {argument}={block} must be a multiple of 64")
        _check_divides("attention", argument, block, size, dim)
    return plgpu.kernel(
        functools.partial(_attention_exp2_kernel, causal=causal, block_q=block_q,
                          block_kv=block_kv, sm_scale=1 / math.sqrt(H)),
        out_type=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(B, N, T // block_q),
        grid_names=("b", "n", "q"),
        scratch_types=[
            plgpu.SMEM((block_q, H), q.dtype, transforms=wgmma_transforms(H, q.dtype)),
            plgpu.SMEM((block_q, block_kv), q.dtype,
                       transforms=wgmma_transforms(block_kv, q.dtype)),
            plgpu.SMEM((block_q, H), q.dtype),
            plgpu.Barrier(),
        ],
    )(q, k, v)
