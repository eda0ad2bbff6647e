"""linear.gating: the cumulative log decay by jnp.cumsum inside the kernel, which has no
TPU lowering."""
PUZZLE = "linear.gating"
EXPECT = "jnp.cumsum has no TPU lowering"


def decay_factors(log_decay):
    C = log_decay.shape[0]
    row = jax.lax.broadcasted_iota(jnp.int32, (C, C), 0)
    col = jax.lax.broadcasted_iota(jnp.int32, (C, C), 1)
    b = jnp.cumsum(log_decay, axis=0)                                  # (C, 1)
    b_row = b.reshape(1, C)
    total = jnp.sum(log_decay, axis=0, keepdims=True)
    within = jnp.exp(jnp.where(col <= row, b - b_row, -jnp.inf))
    return within, jnp.exp(b), jnp.exp(total - b), jnp.exp(total)
