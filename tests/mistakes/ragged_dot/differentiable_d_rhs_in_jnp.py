"""ragged_dot.differentiable: d rhs computed in plain JAX (a one-hot einsum over the rows),
not by tgmm."""
PUZZLE = "ragged_dot.differentiable"
EXPECT = "d rhs a tgmm of lhs.T and grad; only the transposes may stay outside"


def ragged_dot(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    tm, tk, tn = tiling

    @jax.custom_vjp
    def grouped(lhs, rhs, group_sizes):
        return gmm(lhs, rhs, group_sizes, tiling=(tm, tk, tn))

    def forward(lhs, rhs, group_sizes):
        return grouped(lhs, rhs, group_sizes), (lhs, rhs, group_sizes)

    def backward(residuals, grad):
        lhs, rhs, group_sizes = residuals
        d_lhs = gmm(grad, jnp.swapaxes(rhs, 1, 2), group_sizes, tiling=(tm, tn, tk))
        group_of_row = jnp.repeat(jnp.arange(rhs.shape[0]), group_sizes,
                                  total_repeat_length=lhs.shape[0])
        one_hot = (group_of_row[:, None] == jnp.arange(rhs.shape[0])).astype(lhs.dtype)
        d_rhs = jnp.einsum("me,mk,mn->ekn", one_hot, lhs, grad).astype(rhs.dtype)
        return d_lhs, d_rhs, None

    grouped.defvjp(forward, backward)
    return grouped(lhs, rhs, group_sizes)
