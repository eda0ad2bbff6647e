"""basics.tail: multiplies by the mask instead of selecting with it. XLA on a CPU
would turn the multiply into a select and hide the garbage rows; a TPU computes
NaN * 0 = NaN, and so does the kit."""
PUZZLE = "basics.tail"
EXPECT = "NaN * 0 = NaN"


def column_sums_kernel(x_ref, o_ref, *, M):
    bm = x_ref.shape[0]
    row = pl.program_id(0) * bm + jax.lax.broadcasted_iota(jnp.int32, x_ref.shape, 0)
    x = x_ref[...] * (row < M).astype(x_ref.dtype)
    o_ref[...] = jnp.sum(x, axis=0, keepdims=True)
