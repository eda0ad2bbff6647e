"""linear.api: the output keeps the last T rows of the padded result, padding included."""
PUZZLE = "linear.api"
EXPECT = "the output kept the last T rows of the padded result"


def chunked_attention(q, k, v, *, log_decay=None, beta=None, chunk=64):
    """The four recurrences as one chunked kernel each: log_decay [B, N, T] (<= 0) turns
    on gating, beta [B, N, T] (in [0, 1]) the delta rule. Any T >= 1."""
    if q.ndim != 4:
        raise ValueError(f"linear attention: q must be [B, N, T, H]; got shape {q.shape}")
    if k.shape != q.shape:
        raise ValueError(f"linear attention: k must have q's shape {q.shape}; got {k.shape}")
    if v.ndim != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"linear attention: v must be [B, N, T, Hv] with q's B, N, T "
                         f"{q.shape[:3]}; got {v.shape}")
    for name, x in (("log_decay", log_decay), ("beta", beta)):
        if x is not None and x.shape != q.shape[:3]:
            raise ValueError(f"linear attention: {name} must be [B, N, T] = {q.shape[:3]}; "
                             f"got {x.shape}")
    if not (q.dtype == k.dtype == v.dtype) or not jnp.issubdtype(q.dtype, jnp.floating):
        raise ValueError(f"linear attention: q, k and v must share one floating dtype; "
                         f"got {q.dtype}, {k.dtype}, {v.dtype}")
    if not isinstance(chunk, int) or chunk <= 0 or chunk % 8:
        raise ValueError(f"linear attention: chunk={chunk!r} must be a positive multiple "
                         "of 8 (the TPU's sublane count)")
    T = q.shape[2]
    if T < 1:
        raise ValueError("linear attention: T must be at least 1")

    # Whole chunks only: a chunk longer than the sequence shrinks to it (rounded up to
    # 8 rows), and T is padded with zeros. Padding comes after every real token, and
    # nothing flows backwards in time: the real outputs never see it.
    chunk = min(chunk, -(-T // 8) * 8)
    padding = -T % chunk
    q, k, v = (jnp.pad(x, ((0, 0), (0, 0), (0, padding), (0, 0))) for x in (q, k, v))
    per_token = [jnp.pad(x, ((0, 0), (0, 0), (0, padding)))
                 for x in (beta, log_decay) if x is not None]
    kernel = {(False, False): linear_kernel, (True, False): gated_kernel,
              (False, True): delta_kernel,
              (True, True): gated_delta_kernel}[(log_decay is not None, beta is not None)]
    return chunked_call(q, k, v, *per_token, kernel=kernel, chunk=chunk)[:, :, -T:]
