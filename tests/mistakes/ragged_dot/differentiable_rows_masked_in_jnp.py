"""ragged_dot.differentiable: the rows past the last group zeroed in plain JAX around the
tgmm ("in case the sizes sum to less than M"): a jnp.where on lhs outside the kernels,
where the kernels' own masks already keep each group's rows."""
PUZZLE = "ragged_dot.differentiable"
EXPECT = "gmm and tgmm mask their own rows in the kernel"


def ragged_dot(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    tm, tk, tn = tiling

    @jax.custom_vjp
    def grouped(lhs, rhs, group_sizes):
        return gmm(lhs, rhs, group_sizes, tiling=(tm, tk, tn))

    def grouped_forward(lhs, rhs, group_sizes):
        return grouped(lhs, rhs, group_sizes), (lhs, rhs, group_sizes)

    def grouped_backward(residuals, grad):
        lhs, rhs, group_sizes = residuals
        d_lhs = gmm(grad, jnp.swapaxes(rhs, 1, 2), group_sizes, tiling=(tm, tn, tk))
        grouped_rows = jnp.arange(lhs.shape[0]) < jnp.sum(group_sizes)
        lhs = jnp.where(grouped_rows[:, None], lhs, 0)
        d_rhs = tgmm(lhs.T, grad, group_sizes, tiling=(tm, tk, tn))
        return d_lhs, d_rhs, None

    grouped.defvjp(grouped_forward, grouped_backward)
    return grouped(lhs, rhs, group_sizes)
