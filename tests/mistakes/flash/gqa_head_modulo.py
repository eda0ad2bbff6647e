"""flash.gqa: query head n reads K/V head n % K instead of n // (N // K)."""
PUZZLE = "flash.gqa"
EXPECT = "head n reads K/V head n // (N // K)"


def flash_forward(q, k, v, *, causal=False, sm_scale=None, block_q=128, block_kv=128,
                  kv_len=None):
    B, N, T, H = q.shape
    K, S = k.shape[1], k.shape[2]
    if T % block_q or S % block_kv:
        raise ValueError(f"flash_forward: T={T} must be a multiple of block_q={block_q} "
                         f"and S={S} of block_kv={block_kv}")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    group = N // K   # query heads per K/V head (puzzle 8); 1 when K == N

    def q_index_map(b, n, i, kv):
        return (b, n, i, 0)

    def kv_index_map(b, n, i, kv):
        if causal:  # skipped blocks re-name the last needed one: nothing is fetched
            kv = jnp.minimum(kv, ((i + 1) * block_q - 1) // block_kv)
        return (b, n % K, kv, 0)

    q_spec = pl.BlockSpec((None, None, block_q, H), q_index_map)
    kv_spec = pl.BlockSpec((None, None, block_kv, H), kv_index_map)
    # lse is stored as [B, N, T, 1]: a (block_q, 1) block obeys the TPU's (8, 128)
    # rule because its last dim equals the array's.
    lse_spec = pl.BlockSpec((None, None, block_q, 1), q_index_map)
    o, lse = pl.pallas_call(
        functools.partial(flash_fwd_kernel, sm_scale=sm_scale, causal=causal, kv_len=kv_len),
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((B, N, T, 1), jnp.float32)],
        grid=(B, N, T // block_q, S // block_kv),
        in_specs=[q_spec, kv_spec, kv_spec],
        out_specs=[q_spec, lse_spec],
        scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, H), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v)
    return o, lse[..., 0]
