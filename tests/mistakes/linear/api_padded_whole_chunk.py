"""linear.api: T padded by chunk - T % chunk, a whole extra chunk of zeros when the chunk
divides T: the values are right, the work is a chunk too much per sequence."""
PUZZLE = "linear.api"
EXPECT = "or a whole extra chunk of zeros (chunk - T % chunk)"


def chunked_attention(q, k, v, *, log_decay=None, beta=None, chunk=64):
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(f"linear attention: v must be [B, N, T, Hv]; got {v.shape}")
    for name, x in (("log_decay", log_decay), ("beta", beta)):
        if x is not None and x.shape != q.shape[:3]:
            raise ValueError(f"linear attention: {name} must be [B, N, T]; got {x.shape}")
    if chunk % 8:
        raise ValueError(f"linear attention: chunk={chunk} must be a multiple of 8")
    T = q.shape[2]
    chunk = min(chunk, -(-T // 8) * 8)
    padding = chunk - T % chunk     # a whole chunk of zeros when chunk divides T
    q, k, v = (jnp.pad(x, ((0, 0), (0, 0), (0, padding), (0, 0))) for x in (q, k, v))
    per_token = [jnp.pad(x, ((0, 0), (0, 0), (0, padding)))
                 for x in (beta, log_decay) if x is not None]
    kernel = {(False, False): linear_kernel, (True, False): gated_kernel,
              (False, True): delta_kernel,
              (True, True): gated_delta_kernel}[(log_decay is not None, beta is not None)]
    return chunked_call(q, k, v, *per_token, kernel=kernel, chunk=chunk)[:, :, :T]
