"""ragged_dot.masked (shortcut): every row and every expert in one kernel step, each
expert's rows selected inside."""
PUZZLE = "ragged_dot.masked"
EXPECT = "runs once, over the whole array"


def gmm_masked(lhs, rhs, group_sizes, *, tm=128, tn=128):
    M, K = lhs.shape
    E, _, N = rhs.shape
    ends = jnp.cumsum(group_sizes).reshape(1, E)

    def whole_kernel(ends_ref, lhs_ref, rhs_ref, out_ref):
        rows = jax.lax.broadcasted_iota(jnp.int32, (M, N), 0)
        out = jnp.zeros((M, N), jnp.float32)
        for e in range(E):
            start = ends_ref[0, e - 1] if e else 0
            product = jnp.dot(lhs_ref[...], rhs_ref[e], preferred_element_type=jnp.float32)
            out = jnp.where((rows >= start) & (rows < ends_ref[0, e]), product, out)
        out_ref[...] = out.astype(out_ref.dtype)

    return pl.pallas_call(whole_kernel, out_shape=jax.ShapeDtypeStruct((M, N), lhs.dtype))(
        ends, lhs, rhs)
