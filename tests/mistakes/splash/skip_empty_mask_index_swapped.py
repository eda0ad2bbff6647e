"""splash.skip_empty: flash_block_mask: the mask's index map returns (kv, i) instead of (i, kv)."""
PUZZLE = "splash.skip_empty"
EXPECT = "the mask, cut in (block_q, block_kv) tiles, tile (i, kv)"


def flash_block_mask(q, k, v, mask, *, sm_scale=None, block_q=128, block_kv=128):
    B, N, T, H = q.shape
    S = k.shape[2]
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != (T, S):
        raise ValueError(f"flash_block_mask: mask must be [T={T}, S={S}]; got {mask.shape}")
    if T % block_q or S % block_kv:
        raise ValueError(f"flash_block_mask: T={T} must be a multiple of block_q={block_q} "
                         f"and S={S} of block_kv={block_kv}")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    # Known before tracing: it goes to SMEM, where the kernel reads one entry per step.
    categories = block_categories(mask, block_q, block_kv).astype(np.int32)

    def q_index_map(b, n, i, kv, categories_ref):
        return (b, n, i, 0)

    def kv_index_map(b, n, i, kv, categories_ref):
        return (b, n, kv, 0)

    def mask_index_map(b, n, i, kv, categories_ref):
        return (kv, i)

    q_spec = pl.BlockSpec((None, None, block_q, H), q_index_map)
    kv_spec = pl.BlockSpec((None, None, block_kv, H), kv_index_map)
    return pl.pallas_call(
        functools.partial(block_mask_kernel, sm_scale=sm_scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(B, N, T // block_q, S // block_kv),
            in_specs=[q_spec, kv_spec, kv_spec,
                      pl.BlockSpec((block_q, block_kv), mask_index_map)],
            out_specs=q_spec,
            scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32),     # m
                            pltpu.VMEM((block_q, 1), jnp.float32),     # l
                            pltpu.VMEM((block_q, H), jnp.float32)]),   # acc
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(categories, q, k, v, mask)
