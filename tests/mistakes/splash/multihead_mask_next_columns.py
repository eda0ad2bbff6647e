"""splash.multihead: splash_attention: mask_next taken as block_index's first width columns (block_index[..., :width]) instead of looked up at data_next."""
PUZZLE = "splash.multihead"
EXPECT = "the partial steps read the wrong stored mask block"


def splash_attention(q, k, v, mask, *, sm_scale=None, block_q=128, block_kv=128):
    """Block-sparse attention with Pallas TPU kernels.

    q: [B, N, T, H] queries; k, v: [B, K, S, H] keys and values, K dividing N: query
        head n attends with K/V head n // (N // K). Any T, S >= 1.
    mask: concrete booleans (a NumPy array or a concrete jax.Array), [T, S] for every
        head or [N, T, S] per query head: query t sees key s where mask[..., t, s].
        Never traced: what the kernel needs to know about it is computed in NumPy.
    sm_scale: scale of the scores q k^T; None means 1 / sqrt(H).
    block_q, block_kv: block sizes along T and S, positive multiples of 8; a block
        longer than its sequence shrinks to it.

    Returns o [B, N, T, H] in q's dtype (float32 accumulation inside). A query that
    sees no key gets 0. Only the (q block, kv block) pairs with a visible key are
    computed or fetched; a partly visible block reads its mask from a store that
    holds each distinct pattern once. Raises ValueError, naming the argument, on
    inconsistent inputs.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"splash_attention: q, k and v must be 4-D, [B, N, T, H] and "
                         f"[B, K, S, H]; got shapes {q.shape}, {k.shape}, {v.shape}")
    B, N, T, H = q.shape
    _, K, S, _ = k.shape
    if k.shape != v.shape:
        raise ValueError(f"splash_attention: k and v must have one shape; got {k.shape} "
                         f"and {v.shape}")
    if k.shape[0] != B or k.shape[3] != H:
        raise ValueError(f"splash_attention: k and v must be [B={B}, K, S, H={H}] like q; "
                         f"got {k.shape}")
    if K < 1 or N % K:
        raise ValueError(f"splash_attention: the number of query heads N={N} must be a "
                         f"multiple of the number of K/V heads K={K}")
    if T < 1 or S < 1:
        raise ValueError(f"splash_attention: T={T} and S={S} must be at least 1")
    if not (q.dtype == k.dtype == v.dtype) or not jnp.issubdtype(q.dtype, jnp.floating):
        raise ValueError(f"splash_attention: q, k and v must share one floating dtype; got "
                         f"{q.dtype}, {k.dtype}, {v.dtype}")
    mask = np.asarray(mask)
    if mask.dtype != bool or mask.shape not in ((T, S), (N, T, S)):
        raise ValueError(f"splash_attention: mask must be booleans [T={T}, S={S}] or "
                         f"[N={N}, T, S]; got {mask.dtype} {mask.shape}")
    for name, block in (("block_q", block_q), ("block_kv", block_kv)):
        if not isinstance(block, (int, np.integer)) or block <= 0 or block % 8:
            raise ValueError(f"splash_attention: {name}={block!r} must be a positive "
                             "multiple of 8 (the TPU's sublane count)")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)

    # Whole blocks only: shrink a block longer than its (rounded-up) sequence, then pad
    # the sequences to a multiple of it. Padding is only more mask: padded keys are
    # hidden from every query, and padded queries see nothing and are cut off.
    block_q = min(int(block_q), -(-T // 8) * 8)
    block_kv = min(int(block_kv), -(-S // 8) * 8)
    T_padded, S_padded = -(-T // block_q) * block_q, -(-S // block_kv) * block_kv
    heads = mask if mask.ndim == 3 else mask[None]    # [1 or N, T, S]
    heads = np.pad(heads, ((0, 0), (0, T_padded - T), (0, S_padded - S)))

    # The tables, per mask head: which kv block each step visits, what it does there,
    # and which stored mask block a partial step reads.
    data_next, block_mask = compact(block_categories(heads, block_q, block_kv))
    mask_blocks, block_index = dedup_blocks(heads, block_q, block_kv)
    mask_next = fill_ahead(block_index[..., :data_next.shape[-1]], block_mask == PARTIAL)
    tables = [np.broadcast_to(table, (N, *table.shape[1:]))   # one table per query head
              for table in (data_next, block_mask, mask_next)]

    q = jnp.pad(q, ((0, 0), (0, 0), (0, T_padded - T), (0, 0)))
    k = jnp.pad(k, ((0, 0), (0, 0), (0, S_padded - S), (0, 0)))
    v = jnp.pad(v, ((0, 0), (0, 0), (0, S_padded - S), (0, 0)))
    o = splash_call(q, k, v, *tables, mask_blocks, sm_scale=float(sm_scale))
    return o[:, :, :T]
