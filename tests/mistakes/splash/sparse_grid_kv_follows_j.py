"""splash.sparse_grid: the K/V index maps name kv block j, the step, not data_next."""
PUZZLE = "splash.sparse_grid"
EXPECT = "the step along the list, not the block on the list"


def splash_call(q, k, v, data_next, block_mask, mask_next, mask_blocks, *, sm_scale=None):
    B, N, T, H = q.shape
    K = k.shape[1]
    _, block_q, block_kv = mask_blocks.shape
    sm_scale = 1 / math.sqrt(H) if sm_scale is None else sm_scale
    group = N // K
    q_spec = pl.BlockSpec((None, None, block_q, H), lambda b, n, i, j, *tables: (b, n, i, 0))
    kv_spec = pl.BlockSpec((None, None, block_kv, H),
                           lambda b, n, i, j, *tables: (b, n // group, j, 0))
    mask_spec = pl.BlockSpec((None, block_q, block_kv),
                             lambda b, n, i, j, data_next_ref, block_mask_ref, mask_next_ref:
                             (mask_next_ref[n, i, j], 0, 0))
    return pl.pallas_call(
        functools.partial(splash_kernel, sm_scale=sm_scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=3, grid=(B, N, T // block_q, data_next.shape[-1]),
            in_specs=[q_spec, kv_spec, kv_spec, mask_spec], out_specs=q_spec,
            scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32),
                            pltpu.VMEM((block_q, 1), jnp.float32),
                            pltpu.VMEM((block_q, H), jnp.float32)]),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(data_next, block_mask, mask_next, q, k, v, mask_blocks)
