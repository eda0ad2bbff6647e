"""flash.grid: K and V's index map returns the q block index i, not the kv step j."""
PUZZLE = "flash.grid"
EXPECT = "q block i attended only to kv block i"

def flash_grid(q, k, v, *, sm_scale=None, block_q=128, block_kv=128):
    B, N, T, H = q.shape
    S = k.shape[2]
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    q_spec = pl.BlockSpec((None, None, block_q, H), lambda b, n, i, j: (b, n, i, 0))
    kv_spec = pl.BlockSpec((None, None, block_kv, H), lambda b, n, i, j: (b, n, i, 0))
    return pl.pallas_call(functools.partial(flash_kernel, sm_scale=sm_scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype), grid=(B, N, T // block_q, S // block_kv),
        in_specs=[q_spec, kv_spec, kv_spec], out_specs=q_spec,
        scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32), pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, H), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")))(q, k, v)

