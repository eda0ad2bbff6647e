"""splash.multihead: the tables' padding steps name kv block 0 (data_next left at 0
past the end of a shorter list, not filled ahead): a padding step after a visit of
another block copies block 0 for nothing."""
PUZZLE = "splash.multihead"
EXPECT = "K and V move more than the visited blocks"


def splash_attention(q, k, v, mask, *, sm_scale=None, block_q=128, block_kv=128):
    B, N, T, H = q.shape
    S = k.shape[2]
    mask = np.asarray(mask)
    block_q, block_kv = min(block_q, -(-T // 8) * 8), min(block_kv, -(-S // 8) * 8)
    T_padded, S_padded = -(-T // block_q) * block_q, -(-S // block_kv) * block_kv
    heads = mask if mask.ndim == 3 else mask[None]
    heads = np.pad(heads, ((0, 0), (0, T_padded - T), (0, S_padded - S)))
    data_next, block_mask = compact(block_categories(heads, block_q, block_kv))
    data_next = np.where(block_mask != EMPTY, data_next, 0)
    mask_blocks, block_index = dedup_blocks(heads, block_q, block_kv)
    mask_next = fill_ahead(np.take_along_axis(block_index, data_next, axis=-1),
                           block_mask == PARTIAL)
    tables = [np.broadcast_to(t, (N, *t.shape[1:])) for t in (data_next, block_mask, mask_next)]
    q = jnp.pad(q, ((0, 0), (0, 0), (0, T_padded - T), (0, 0)))
    k = jnp.pad(k, ((0, 0), (0, 0), (0, S_padded - S), (0, 0)))
    v = jnp.pad(v, ((0, 0), (0, 0), (0, S_padded - S), (0, 0)))
    return splash_call(q, k, v, *tables, mask_blocks, sm_scale=sm_scale)[:, :, :T]
