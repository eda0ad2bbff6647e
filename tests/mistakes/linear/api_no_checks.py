"""linear.api: no argument checks: a v of another length fails deep inside JAX."""
PUZZLE = "linear.api"
EXPECT = "raise ValueError with the argument's name"


def chunked_attention(q, k, v, *, log_decay=None, beta=None, chunk=64):
    T = q.shape[2]
    chunk = min(chunk, -(-T // 8) * 8)
    padding = -T % chunk
    q, k, v = (jnp.pad(x, ((0, 0), (0, 0), (0, padding), (0, 0))) for x in (q, k, v))
    per_token = [jnp.pad(x, ((0, 0), (0, 0), (0, padding)))
                 for x in (beta, log_decay) if x is not None]
    kernel = {(False, False): linear_kernel, (True, False): gated_kernel,
              (False, True): delta_kernel,
              (True, True): gated_delta_kernel}[(log_decay is not None, beta is not None)]
    return chunked_call(q, k, v, *per_token, kernel=kernel, chunk=chunk)[:, :, :T]
