"""linear.gating: the cumulative decay sums the tokens before i only (s < j)."""
PUZZLE = "linear.gating"
EXPECT = "your cumulative decay leaves each token's own decay out"


def decay_factors(log_decay):
    C = log_decay.shape[0]
    row = jax.lax.broadcasted_iota(jnp.int32, (C, C), 0)
    col = jax.lax.broadcasted_iota(jnp.int32, (C, C), 1)
    b_row = jnp.sum(jnp.where(row < col, log_decay, 0.0), axis=0, keepdims=True)
    b = jnp.sum(jnp.where(row == col, b_row, 0.0), axis=1, keepdims=True)
    total = jnp.sum(log_decay, axis=0, keepdims=True)
    within = jnp.exp(jnp.where(col <= row, b - b_row, -jnp.inf))
    return within, jnp.exp(b), jnp.exp(total - b), jnp.exp(total)
