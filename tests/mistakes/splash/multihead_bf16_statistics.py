"""splash.multihead: every piece of the running state in q's dtype (bfloat16 scratch
for m, l and acc in splash_call), cast back and forth around online_softmax_step."""
PUZZLE = "splash.multihead"
EXPECT = "the scratch for m, l and acc is float32 whatever q's dtype"


def splash_kernel(data_next_ref, block_mask_ref, mask_next_ref, q_ref, k_ref, v_ref, mask_ref,
                  o_ref, m_scratch, l_scratch, acc_scratch, *, sm_scale):
    n, i, j = pl.program_id(1), pl.program_id(2), pl.program_id(3)
    category = block_mask_ref[n, i, j]

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
        m_scratch[...] = m.astype(m_scratch.dtype)
        l_scratch[...] = l.astype(l_scratch.dtype)
        acc_scratch[...] = acc.astype(acc_scratch.dtype)

    @pl.when(category == FULL)
    def fold_full_block():
        fold(None)

    @pl.when(category == PARTIAL)
    def fold_partial_block():
        fold(mask_ref[...])

    @pl.when(j == pl.num_programs(3) - 1)
    def finish_q_block():
        l = l_scratch[...]
        o_ref[...] = (acc_scratch[...] / jnp.where(l == 0, 1, l)).astype(o_ref.dtype)


def splash_call(q, k, v, data_next, block_mask, mask_next, mask_blocks, *, sm_scale=None):
    B, N, T, H = q.shape
    K = k.shape[1]
    _, block_q, block_kv = mask_blocks.shape
    sm_scale = 1 / math.sqrt(H) if sm_scale is None else sm_scale
    group = N // K
    q_spec = pl.BlockSpec((None, None, block_q, H), lambda b, n, i, j, *tables: (b, n, i, 0))
    kv_spec = pl.BlockSpec((None, None, block_kv, H),
                           lambda b, n, i, j, data_next_ref, *rest:
                           (b, n // group, data_next_ref[n, i, j], 0))
    mask_spec = pl.BlockSpec((None, block_q, block_kv),
                             lambda b, n, i, j, data_next_ref, block_mask_ref, mask_next_ref:
                             (mask_next_ref[n, i, j], 0, 0))
    return pl.pallas_call(
        functools.partial(splash_kernel, sm_scale=sm_scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=3, grid=(B, N, T // block_q, data_next.shape[-1]),
            in_specs=[q_spec, kv_spec, kv_spec, mask_spec], out_specs=q_spec,
            scratch_shapes=[pltpu.VMEM((block_q, 1), q.dtype),
                            pltpu.VMEM((block_q, 1), q.dtype),
                            pltpu.VMEM((block_q, H), q.dtype)]),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(data_next, block_mask, mask_next, q, k, v, mask_blocks)
