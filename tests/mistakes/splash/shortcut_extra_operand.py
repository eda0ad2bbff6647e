"""splash.multihead (shortcut): the mask stored in full, every tile of it (no
de-duplication), behind a small extra operand placed where the mask blocks usually sit
(operand 3). Only a check that finds the mask store by where it comes from (no input:
the function built it), not by its place in the call, sees the full store."""
PUZZLE = "splash.multihead"
EXPECT = "take more memory than the distinct partial patterns"


def splash_kernel(data_next_ref, block_mask_ref, mask_next_ref, q_ref, k_ref, v_ref, extra_ref,
                  mask_ref, o_ref, m_scratch, l_scratch, acc_scratch, *, sm_scale):
    n, i, j = pl.program_id(1), pl.program_id(2), pl.program_id(3)
    category = block_mask_ref[n, i, j]

    @pl.when(j == 0)
    def start_q_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)
        acc_scratch[...] = extra_ref[0:1, 0:1] * jnp.zeros_like(acc_scratch)

    def fold(visible):
        s = jnp.einsum("qh,kh->qk", q_ref[...], k_ref[...],
                       preferred_element_type=jnp.float32) * sm_scale
        m, l, acc = online_softmax_step(m_scratch[...], l_scratch[...], acc_scratch[...],
                                        s, v_ref[...], visible)
        m_scratch[...] = m
        l_scratch[...] = l
        acc_scratch[...] = acc

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
    extra_spec = pl.BlockSpec((8, 128), lambda b, n, i, j, *tables: (0, 0))
    mask_spec = pl.BlockSpec((None, block_q, block_kv),
                             lambda b, n, i, j, data_next_ref, block_mask_ref, mask_next_ref:
                             (mask_next_ref[n, i, j], 0, 0))
    return pl.pallas_call(
        functools.partial(splash_kernel, sm_scale=sm_scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=3, grid=(B, N, T // block_q, data_next.shape[-1]),
            in_specs=[q_spec, kv_spec, kv_spec, extra_spec, mask_spec], out_specs=q_spec,
            scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32),
                            pltpu.VMEM((block_q, 1), jnp.float32),
                            pltpu.VMEM((block_q, H), jnp.float32)]),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(data_next, block_mask, mask_next, q, k, v, np.ones((8, 128), np.float32), mask_blocks)


def splash_attention(q, k, v, mask, *, sm_scale=None, block_q=128, block_kv=128):
    B, N, T, H = q.shape
    S = k.shape[2]
    mask = np.asarray(mask)
    block_q, block_kv = min(block_q, -(-T // 8) * 8), min(block_kv, -(-S // 8) * 8)
    T_padded, S_padded = -(-T // block_q) * block_q, -(-S // block_kv) * block_kv
    heads = mask if mask.ndim == 3 else mask[None]
    heads = np.pad(heads, ((0, 0), (0, T_padded - T), (0, S_padded - S)))
    M, nq, nkv = len(heads), T_padded // block_q, S_padded // block_kv
    data_next, block_mask = compact(block_categories(heads, block_q, block_kv))
    mask_blocks = heads.reshape(M, nq, block_q, nkv, block_kv).swapaxes(2, 3).reshape(
        -1, block_q, block_kv)
    block_index = np.arange(M * nq * nkv, dtype=np.int32).reshape(M, nq, nkv)
    mask_next = fill_ahead(np.take_along_axis(block_index, data_next, axis=-1),
                           block_mask == PARTIAL)
    tables = [np.broadcast_to(t, (N, *t.shape[1:])) for t in (data_next, block_mask, mask_next)]
    q = jnp.pad(q, ((0, 0), (0, 0), (0, T_padded - T), (0, 0)))
    k = jnp.pad(k, ((0, 0), (0, 0), (0, S_padded - S), (0, 0)))
    v = jnp.pad(v, ((0, 0), (0, 0), (0, S_padded - S), (0, 0)))
    return splash_call(q, k, v, *tables, mask_blocks, sm_scale=sm_scale)[:, :, :T]
