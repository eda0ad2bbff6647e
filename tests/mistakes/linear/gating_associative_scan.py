"""linear.gating: the cumulative log decay by lax.associative_scan inside the kernel. It
runs in interpret mode, but Mosaic cannot lower the slices the scan makes of a value; the
diagnosis names the operation, the line and Mosaic's reason, and blames no other op."""
PUZZLE = "linear.gating"
EXPECT = "Mosaic, the TPU compiler, cannot lower the `slice` made at"


def decay_factors(log_decay):
    C = log_decay.shape[0]
    row = jax.lax.broadcasted_iota(jnp.int32, (C, C), 0)
    col = jax.lax.broadcasted_iota(jnp.int32, (C, C), 1)
    b = jax.lax.associative_scan(jnp.add, log_decay, axis=0)          # (C, 1)
    b_row = b.reshape(1, C)
    total = jnp.sum(log_decay, axis=0, keepdims=True)
    within = jnp.exp(jnp.where(col <= row, b - b_row, -jnp.inf))
    return within, jnp.exp(b), jnp.exp(total - b), jnp.exp(total)
