"""flash.gqa: pads by block - T % block, a whole extra block when the block divides T
(and S): the grid walks a padded block of nothing (one configuration has whole blocks)."""
PUZZLE = "flash.gqa"
EXPECT = "one grid step per block along each axis"


def flash_attention(q, k, v, *, causal=False, sm_scale=None, block_q=128, block_kv=128):
    """Flash attention with Pallas TPU kernels, forward and backward.

    q: [B, N, T, H] queries; k, v: [B, K, S, H] keys and values, K dividing N:
        query head n attends with K/V head n // (N // K). Any T, S >= 1.
    causal: top-left causal mask, query i sees keys j <= i (also when T != S).
    sm_scale: scale of the scores q k^T; None means 1 / sqrt(H).
    block_q, block_kv: block sizes along T and S, positive multiples of 8; a block
        longer than its sequence shrinks to it.

    Returns o [B, N, T, H] in q's dtype (float32 accumulation inside), differentiable
    in q, k and v. Raises ValueError, naming the argument, on inconsistent inputs.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"flash_attention: q, k and v must be 4-D, [B, N, T, H] and "
                         f"[B, K, S, H]; got shapes {q.shape}, {k.shape}, {v.shape}")
    B, N, T, H = q.shape
    _, K, S, _ = k.shape
    if k.shape != v.shape:
        raise ValueError(f"flash_attention: k and v must have one shape; got {k.shape} "
                         f"and {v.shape}")
    if k.shape[0] != B or k.shape[3] != H:
        raise ValueError(f"flash_attention: k and v must be [B={B}, K, S, H={H}] like q; "
                         f"got {k.shape}")
    if K < 1 or N % K:
        raise ValueError(f"flash_attention: the number of query heads N={N} must be a "
                         f"multiple of the number of K/V heads K={K}")
    if T < 1 or S < 1:
        raise ValueError(f"flash_attention: T={T} and S={S} must be at least 1")
    if not (q.dtype == k.dtype == v.dtype) or not jnp.issubdtype(q.dtype, jnp.floating):
        raise ValueError(f"flash_attention: q, k and v must share one floating dtype; got "
                         f"{q.dtype}, {k.dtype}, {v.dtype}")
    for name, block in (("block_q", block_q), ("block_kv", block_kv)):
        if not isinstance(block, (int, np.integer)) or block <= 0 or block % 8:
            raise ValueError(f"flash_attention: {name}={block!r} must be a positive "
                             "multiple of 8 (the TPU's sublane count)")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    sm_scale = float(sm_scale)

    # Whole blocks only: shrink a block that is longer than its (rounded-up) sequence,
    # then pad the sequence to a multiple of it. Padded keys are masked (kv_len);
    # padded queries are cut off the output, so their gradient is zero.
    block_q = min(int(block_q), -(-T // 8) * 8)
    block_kv = min(int(block_kv), -(-S // 8) * 8)
    T_padded, S_padded = T + block_q - T % block_q, S + block_kv - S % block_kv
    q = jnp.pad(q, ((0, 0), (0, 0), (0, T_padded - T), (0, 0)))
    k = jnp.pad(k, ((0, 0), (0, 0), (0, S_padded - S), (0, 0)))
    v = jnp.pad(v, ((0, 0), (0, 0), (0, S_padded - S), (0, 0)))
    o = flash_core(q, k, v, causal=causal, sm_scale=sm_scale, block_q=block_q,
                   block_kv=block_kv, kv_len=S if S_padded != S else None)
    return o[:, :, :T]
