"""ragged_dot.differentiable: d rhs computed as tgmm(grad.T, lhs) (operands swapped: [E, N,
K], equal shape only when K == N)."""
PUZZLE = "ragged_dot.differentiable"
EXPECT = "tgmm got its two operands the other way round"


def ragged_dot(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    """jax.lax.ragged_dot with Pallas kernels: [M, K], [E, K, N] -> [M, N], differentiable
    in lhs and rhs. tiling (tm, tk, tn) as gmm's."""
    tm, tk, tn = tiling

    @jax.custom_vjp
    def grouped(lhs, rhs, group_sizes):
        return gmm(lhs, rhs, group_sizes, tiling=(tm, tk, tn))

    def grouped_forward(lhs, rhs, group_sizes):
        return grouped(lhs, rhs, group_sizes), (lhs, rhs, group_sizes)

    def grouped_backward(residuals, grad):
        lhs, rhs, group_sizes = residuals
        # d lhs [M, K] = grad [M, N] @ rhs[e]^T for each group's rows: a gmm whose
        # contraction is over N. d rhs[e] [K, N] = lhs[rows of e]^T @ grad[rows of e].
        d_lhs = gmm(grad, jnp.swapaxes(rhs, 1, 2), group_sizes, tiling=(tm, tn, tk))
        d_rhs = tgmm(grad.T, lhs, group_sizes, tiling=(tm, tk, tn))
        return d_lhs, d_rhs, None        # group_sizes (integers) has no gradient

    grouped.defvjp(grouped_forward, grouped_backward)
    return grouped(lhs, rhs, group_sizes)
