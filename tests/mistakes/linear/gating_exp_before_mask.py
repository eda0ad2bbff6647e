"""linear.gating: exp(b_i - b_j) taken before masking, then multiplied by a 0/1 mask.
Above the diagonal b_i - b_j > 0, so with strong decay the exp overflows to inf, and
inf * 0 is NaN on a TPU; XLA on CPU rewrites the multiply into a select and hides it."""
PUZZLE = "linear.gating"
EXPECT = "exp before masking"


def decay_factors(log_decay):
    C = log_decay.shape[0]
    row = jax.lax.broadcasted_iota(jnp.int32, (C, C), 0)
    col = jax.lax.broadcasted_iota(jnp.int32, (C, C), 1)
    b_row = jnp.sum(jnp.where(row <= col, log_decay, 0.0), axis=0, keepdims=True)
    b = jnp.sum(jnp.where(row == col, b_row, 0.0), axis=1, keepdims=True)
    total = jnp.sum(log_decay, axis=0, keepdims=True)
    within = jnp.exp(b - b_row) * (col <= row).astype(jnp.float32)
    return within, jnp.exp(b), jnp.exp(total - b), jnp.exp(total)
