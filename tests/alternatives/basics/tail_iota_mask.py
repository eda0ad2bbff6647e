"""basics.tail with the mask built from a 1-D iota broadcast against the block, the
block's first row from pl.ds-free arithmetic on program_id, and the sum written with
lax.select instead of jnp.where."""
PUZZLE = "basics.tail"


def column_sums_kernel(x_ref, o_ref, *, M):
    bm, D = x_ref.shape
    first = pl.program_id(0) * bm
    rows = first + jax.lax.iota(jnp.int32, bm)
    keep = jnp.broadcast_to((rows < M)[:, None], (bm, D))
    x = x_ref[...]
    o_ref[...] = jax.lax.select(keep, x, jnp.zeros_like(x)).sum(axis=0, keepdims=True)
