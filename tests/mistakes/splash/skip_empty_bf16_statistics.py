"""splash.skip_empty: the running max and sum kept in the inputs' dtype (bfloat16 scratch
for m and l), as if the softmax statistics were data like q and k."""
PUZZLE = "splash.skip_empty"
EXPECT = "keep m, l and acc in float32 scratch"


def flash_block_mask(q, k, v, mask, *, sm_scale=None, block_q=128, block_kv=128):
    B, N, T, H = q.shape
    S = k.shape[2]
    mask = np.asarray(mask, dtype=bool)
    sm_scale = 1 / math.sqrt(H) if sm_scale is None else sm_scale
    categories = block_categories(mask, block_q, block_kv).astype(np.int32)
    q_spec = pl.BlockSpec((None, None, block_q, H), lambda b, n, i, kv, c: (b, n, i, 0))
    kv_spec = pl.BlockSpec((None, None, block_kv, H), lambda b, n, i, kv, c: (b, n, kv, 0))
    return pl.pallas_call(
        functools.partial(block_mask_kernel, sm_scale=sm_scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(B, N, T // block_q, S // block_kv),
            in_specs=[q_spec, kv_spec, kv_spec,
                      pl.BlockSpec((block_q, block_kv), lambda b, n, i, kv, c: (i, kv))],
            out_specs=q_spec,
            scratch_shapes=[pltpu.VMEM((block_q, 1), q.dtype),      # m
                            pltpu.VMEM((block_q, 1), q.dtype),      # l
                            pltpu.VMEM((block_q, H), jnp.float32)]),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(categories, q, k, v, mask)


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
        m, l, acc = online_softmax_step(m_scratch[...], l_scratch[...], acc_scratch[...],
                                        s, v_ref[...], visible)
        m_scratch[...] = m.astype(m_scratch.dtype)
        l_scratch[...] = l.astype(l_scratch.dtype)
        acc_scratch[...] = acc

    @pl.when(category == FULL)
    def fold_full_block():
        fold(None)

    @pl.when(category == PARTIAL)
    def fold_partial_block():
        fold(mask_ref[...])

    @pl.when(kv == pl.num_programs(3) - 1)
    def finish_q_block():
        o_ref[...] = (acc_scratch[...] / l_scratch[...]).astype(o_ref.dtype)
