"""linear.api (shortcut): a real kernel runs; the result comes from plain JAX."""
PUZZLE = "linear.api"
EXPECT = "is never used"


def chunked_attention(q, k, v, *, log_decay=None, beta=None, chunk=64):
    chunked_call(q[:, :, :8], k[:, :, :8], v[:, :, :8], kernel=linear_kernel, chunk=8)
    return recurrent(q, k, v, log_decay, beta)
