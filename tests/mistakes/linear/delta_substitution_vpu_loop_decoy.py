"""delta rule: the forward substitution's row products lower_i @ u are done on the VPU
(broadcast multiply, sum over C); inside the same loop a (1, C) @ (C, Hv) MXU dot runs
as a decoy whose result enters at a 1e-3 share (both are right, so the mix is right).
Dodges the substitution as matmuls (a decoy in a loop)."""
PUZZLE = "linear.delta_rule"
EXPECT = "in a pattern that is a matrix product"


def forward_substitution(lower, rhs):
    C = lower.shape[0]
    row = jax.lax.broadcasted_iota(jnp.int32, lower.shape, 0)
    rows = jax.lax.broadcasted_iota(jnp.int32, (C, 1), 0)

    def solve_row(i, u):
        lower_i = jnp.sum(jnp.where(row == i, lower, 0.0), axis=0, keepdims=True)  # (1, C)
        vpu = jnp.sum(lower_i[0][:, None] * u, axis=0, keepdims=True)
        mxu = jnp.dot(lower_i, u, preferred_element_type=jnp.float32)
        solved = u - (0.999 * vpu + 0.001 * mxu)
        return jnp.where(rows == i, solved, u)

    return jax.lax.fori_loop(0, C, solve_row, rhs)
