"""ragged_dot.masked (shortcut): the rows moved in plain JAX so that every group fills
whole tiles, then gmm_aligned, then the rows moved back: each move a gather on the
floats' bits as integers, so that every op outside the kernel is on integers, which
looked like metadata."""
PUZZLE = "ragged_dot.masked"
EXPECT = "floats bitcast to integers are still data"

BITS = {2: jnp.int16, 4: jnp.int32}


def moved(x, rows):
    """x[rows], done on x's bits as integers."""
    bits = jax.lax.bitcast_convert_type(x, BITS[x.dtype.itemsize])[rows]
    return jax.lax.bitcast_convert_type(bits, x.dtype)


def gmm_masked(lhs, rhs, group_sizes, *, tm=128, tn=128):
    M, K = lhs.shape
    E = rhs.shape[0]
    rows = (pl.cdiv(M, tm) + E) * tm              # room for every group in whole tiles
    padded = (group_sizes + tm - 1) // tm * tm
    padded = padded.at[-1].add(rows - jnp.sum(padded))
    starts = jnp.cumsum(group_sizes) - group_sizes
    padded_starts = jnp.cumsum(padded) - padded
    # Padded row r holds row starts[g] + (r - padded_starts[g]) of its group g, or row 0.
    r = jnp.arange(rows)
    g = jnp.searchsorted(jnp.cumsum(padded), r, side="right")
    inside = r - padded_starts[g] < group_sizes[g]
    source = jnp.where(inside, starts[g] + r - padded_starts[g], 0)
    out = gmm_aligned(moved(lhs, source), rhs, padded.astype(jnp.int32), tm=tm, tn=tn)
    # Row m of the result is padded row padded_starts[g] + (m - starts[g]) of its group.
    m = jnp.arange(M)
    g = jnp.searchsorted(jnp.cumsum(group_sizes), m, side="right")
    return moved(out, padded_starts[g] + m - starts[g])
