"""splash.multihead: the kernel reads its masks from every tile of the mask, stored in
full (the layout of JAX's dynamic masks), not from the distinct patterns."""
PUZZLE = "splash.multihead"
EXPECT = "take more memory than the distinct partial patterns"


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
