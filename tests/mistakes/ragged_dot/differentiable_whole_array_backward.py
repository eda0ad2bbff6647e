"""ragged_dot.differentiable: d rhs by one kernel step over the whole of lhs.T and grad,
each expert's rows selected inside (the right values, none of tgmm's visits)."""
PUZZLE = "ragged_dot.differentiable"
EXPECT = "each of the three kernels walks the visits on its grid"


def ragged_dot(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    tm, tk, tn = tiling

    @jax.custom_vjp
    def grouped(lhs, rhs, group_sizes):
        return gmm(lhs, rhs, group_sizes, tiling=(tm, tk, tn))

    def grouped_forward(lhs, rhs, group_sizes):
        return grouped(lhs, rhs, group_sizes), (lhs, rhs, group_sizes)

    def whole_tgmm_kernel(offsets_ref, lhs_ref, grad_ref, out_ref):
        rows = jax.lax.broadcasted_iota(jnp.int32, lhs_ref.shape, 1)
        for e in range(out_ref.shape[0]):
            mine = (rows >= offsets_ref[e]) & (rows < offsets_ref[e + 1])
            out_ref[e] = jnp.dot(jnp.where(mine, lhs_ref[...], 0), grad_ref[...],
                                 preferred_element_type=jnp.float32).astype(out_ref.dtype)

    def grouped_backward(residuals, grad):
        lhs, rhs, group_sizes = residuals
        d_lhs = gmm(grad, jnp.swapaxes(rhs, 1, 2), group_sizes, tiling=(tm, tn, tk))
        offsets = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(group_sizes)])
        (M, K), (E, _, N) = lhs.shape, rhs.shape
        d_rhs = pl.pallas_call(
            whole_tgmm_kernel,
            out_shape=jax.ShapeDtypeStruct(rhs.shape, rhs.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, grid=(1,),
                in_specs=[pl.BlockSpec((K, M), lambda i, offsets: (0, 0)),
                          pl.BlockSpec((M, N), lambda i, offsets: (0, 0))],
                out_specs=pl.BlockSpec((E, K, N), lambda i, offsets: (0, 0, 0))),
        )(offsets.astype(jnp.int32), lhs.T, grad)
        return d_lhs, d_rhs, None

    grouped.defvjp(grouped_forward, grouped_backward)
    return grouped(lhs, rhs, group_sizes)
