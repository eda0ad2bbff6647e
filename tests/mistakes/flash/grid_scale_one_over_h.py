"""flash.grid: sm_scale=None taken as 1 / H instead of 1 / sqrt(H)."""
PUZZLE = "flash.grid"
EXPECT = "your scores look scaled by 1 / H"


def flash_grid(q, k, v, *, sm_scale=None, block_q=128, block_kv=128):
    B, N, T, H = q.shape
    S = k.shape[2]
    if T % block_q or S % block_kv:
        raise ValueError(f"flash_grid: T={T} must be a multiple of block_q={block_q} "
                         f"and S={S} of block_kv={block_kv}")
    if sm_scale is None:
        sm_scale = 1 / H
    # None squeezes the batch and head dims away: the kernel sees (block, H) refs.
    q_spec = pl.BlockSpec((None, None, block_q, H), lambda b, n, i, j: (b, n, i, 0))
    kv_spec = pl.BlockSpec((None, None, block_kv, H), lambda b, n, i, j: (b, n, j, 0))
    return pl.pallas_call(
        functools.partial(flash_kernel, sm_scale=sm_scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(B, N, T // block_q, S // block_kv),
        in_specs=[q_spec, kv_spec, kv_spec],
        out_specs=q_spec,
        scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32),    # m
                        pltpu.VMEM((block_q, 1), jnp.float32),    # l
                        pltpu.VMEM((block_q, H), jnp.float32)],   # acc
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v)
