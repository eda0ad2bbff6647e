"""splash.sparse_grid: splash_call: the mask BlockSpec's leading dim given as 1, not None (mask_ref is (1, block_q, block_kv))."""
PUZZLE = "splash.sparse_grid"
EXPECT = "a (1, block_q, block_kv) mask broadcasts the scores"


def splash_call(q, k, v, data_next, block_mask, mask_next, mask_blocks, *, sm_scale=None):
    B, N, T, H = q.shape
    K, S = k.shape[1], k.shape[2]
    _, block_q, block_kv = mask_blocks.shape
    if N % K or T % block_q or S % block_kv:
        raise ValueError(f"splash_call: N={N} must be a multiple of K={K}, T={T} of "
                         f"block_q={block_q} and S={S} of block_kv={block_kv}")
    if data_next.shape[:2] != (N, T // block_q):
        raise ValueError(f"splash_call: the tables must be [N={N}, T/block_q="
                         f"{T // block_q}, width]; got {data_next.shape}")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    group = N // K   # query heads per K/V head

    def q_index_map(b, n, i, j, data_next_ref, block_mask_ref, mask_next_ref):
        return (b, n, i, 0)

    def kv_index_map(b, n, i, j, data_next_ref, block_mask_ref, mask_next_ref):
        return (b, n // group, data_next_ref[n, i, j], 0)   # the j-th block on i's list

    def mask_index_map(b, n, i, j, data_next_ref, block_mask_ref, mask_next_ref):
        return (mask_next_ref[n, i, j], 0, 0)

    q_spec = pl.BlockSpec((None, None, block_q, H), q_index_map)
    kv_spec = pl.BlockSpec((None, None, block_kv, H), kv_index_map)
    return pl.pallas_call(
        functools.partial(splash_kernel, sm_scale=sm_scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=3,
            grid=(B, N, T // block_q, data_next.shape[-1]),
            in_specs=[q_spec, kv_spec, kv_spec,
                      pl.BlockSpec((1, block_q, block_kv), mask_index_map)],
            out_specs=q_spec,
            scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32),
                            pltpu.VMEM((block_q, 1), jnp.float32),
                            pltpu.VMEM((block_q, H), jnp.float32)]),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(data_next, block_mask, mask_next, q, k, v, mask_blocks)
