"""linear.gating: exp(b_i - b_j) as exp(b_i) * exp(-b_j): under strong decay exp(b_i)
underflows to 0, exp(-b_j) overflows to inf, and 0 * inf is NaN."""
PUZZLE = "linear.gating"
EXPECT = "exp(b_i) * exp(-b_j) is 0 * inf = NaN"


def decay_factors(log_decay):
    C = log_decay.shape[0]
    row = jax.lax.broadcasted_iota(jnp.int32, (C, C), 0)
    col = jax.lax.broadcasted_iota(jnp.int32, (C, C), 1)
    b_row = jnp.sum(jnp.where(row <= col, log_decay, 0.0), axis=0, keepdims=True)
    b = jnp.sum(jnp.where(row == col, b_row, 0.0), axis=1, keepdims=True)
    total = jnp.sum(log_decay, axis=0, keepdims=True)
    within = jnp.where(col <= row, jnp.exp(b) * jnp.exp(-b_row), 0.0)
    return within, jnp.exp(b), jnp.exp(total) * jnp.exp(-b), jnp.exp(total)
