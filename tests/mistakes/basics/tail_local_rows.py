"""basics.tail: masks with the row index inside the block, forgetting program_id."""
PUZZLE = "basics.tail"
EXPECT = "global row index"


def column_sums_kernel(x_ref, o_ref, *, M):
    row = jax.lax.broadcasted_iota(jnp.int32, x_ref.shape, 0)
    x = jnp.where(row < M, x_ref[...], 0)
    o_ref[...] = jnp.sum(x, axis=0, keepdims=True)
