"""linear.gating: across is exp(log_decay_0), the first token's decay, not the
whole chunk's: a float32 error that is sometimes small, never a bf16 rounding."""
PUZZLE = "linear.gating"
EXPECT = "the values of across are wrong"
AVOID = "bf16 rounding"


def decay_factors(log_decay):
    """(within (C, C), since_start (C, 1), until_end (C, 1), across (1, 1)) for one chunk's
    log decays (C, 1): every decay a chunk needs, from b_i = log_decay_0 + ... + log_decay_i."""
    C = log_decay.shape[0]
    row = jax.lax.broadcasted_iota(jnp.int32, (C, C), 0)
    col = jax.lax.broadcasted_iota(jnp.int32, (C, C), 1)
    # No cumsum on a TPU: a masked sum over a triangle. Column j of the (C, C) grid keeps
    # log_decay_s for s <= j, and summing down the rows gives b as a (1, C) row; the
    # diagonal of that row, summed across, gives the same b as a (C, 1) column.
    b_row = jnp.sum(jnp.where(row <= col, log_decay, 0.0), axis=0, keepdims=True)
    b = jnp.sum(jnp.where(row == col, b_row, 0.0), axis=1, keepdims=True)
    total = jnp.sum(log_decay, axis=0, keepdims=True)            # b of the chunk's last token
    # exp(b_i - b_j) as one exp of a masked exponent, never exp(b_i) * exp(-b_j): in a
    # long chunk with strong decay exp(b_i) underflows to 0 and exp(-b_j) overflows.
    within = jnp.exp(jnp.where(col <= row, b - b_row, -jnp.inf))
    return within, jnp.exp(b), jnp.exp(total - b), jnp.exp(log_decay[:1])
