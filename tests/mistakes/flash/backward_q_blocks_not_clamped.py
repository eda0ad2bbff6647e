"""flash.backward: the dK/dV call's q-side index maps are not clamped from below, so
the q blocks a K/V block skips are still fetched."""
PUZZLE = "flash.backward"
EXPECT = "the backward fetched blocks it then skipped"


def flash_backward(q, k, v, o, lse, do, *, causal=False, sm_scale=None, block_q=128,
                   block_kv=128, kv_len=None):
    """(dq, dk, dv) of flash_forward's o for the cotangent do, from its residuals."""
    B, N, T, H = q.shape
    K, S = k.shape[1], k.shape[2]
    if T % block_q or S % block_kv:
        raise ValueError(f"flash_backward: T={T} must be a multiple of block_q={block_q} "
                         f"and S={S} of block_kv={block_kv}")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    group = N // K
    num_q, num_kv = T // block_q, S // block_kv
    # delta[t] = sum_h dO[t, h] * O[t, h]: the softmax backward's row term, once per row.
    delta = jnp.sum(do.astype(jnp.float32) * o.astype(jnp.float32), axis=-1, keepdims=True)
    lse = lse[..., None]
    kernel_args = dict(sm_scale=sm_scale, causal=causal, kv_len=kv_len)
    parallel = ("parallel", "parallel", "parallel")

    # dQ: like the forward, a query block accumulates over the KV blocks.
    def q_rows(b, n, i, kv):
        return (b, n, i, 0)

    def kv_rows(b, n, i, kv):
        if causal:
            kv = jnp.minimum(kv, ((i + 1) * block_q - 1) // block_kv)
        return (b, n // group, kv, 0)

    q_spec = pl.BlockSpec((None, None, block_q, H), q_rows)
    row_spec = pl.BlockSpec((None, None, block_q, 1), q_rows)
    kv_spec = pl.BlockSpec((None, None, block_kv, H), kv_rows)
    dq = pl.pallas_call(
        functools.partial(flash_dq_kernel, **kernel_args),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(B, N, num_q, num_kv),
        in_specs=[q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec],
        out_specs=q_spec,
        scratch_shapes=[pltpu.VMEM((block_q, H), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=parallel + ("arbitrary",)),
    )(q, k, v, do, lse, delta)

    # dK, dV: a KV block accumulates over every query head g of its group and
    # every query block i that sees it.
    def q_rows_of_group(b, h, kv, g, i):
        return (b, h * group + g, i, 0)

    def kv_block(b, h, kv, g, i):
        return (b, h, kv, 0)

    q_spec = pl.BlockSpec((None, None, block_q, H), q_rows_of_group)
    row_spec = pl.BlockSpec((None, None, block_q, 1), q_rows_of_group)
    kv_spec = pl.BlockSpec((None, None, block_kv, H), kv_block)
    dk, dv = pl.pallas_call(
        functools.partial(flash_dkv_kernel, **kernel_args),
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
        grid=(B, K, num_kv, group, num_q),
        in_specs=[q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec],
        out_specs=[kv_spec, kv_spec],
        scratch_shapes=[pltpu.VMEM((block_kv, H), jnp.float32),
                        pltpu.VMEM((block_kv, H), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=parallel + ("arbitrary", "arbitrary")),
    )(q, k, v, do, lse, delta)
    return dq, dk, dv
