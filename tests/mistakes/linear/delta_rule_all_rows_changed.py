"""linear.delta_rule: forward_substitution subtracts lower_i @ u from every row of u at
step i, not only from row i (no jnp.where on the row index)."""
PUZZLE = "linear.delta_rule"
EXPECT = "every row of u changed at every step of forward_substitution"


def forward_substitution(lower, rhs):
    C = lower.shape[0]
    row = jax.lax.broadcasted_iota(jnp.int32, lower.shape, 0)

    def solve_row(i, u):
        lower_i = jnp.sum(jnp.where(row == i, lower, 0.0), axis=0, keepdims=True)
        return u - jnp.dot(lower_i, u, preferred_element_type=jnp.float32)

    return jax.lax.fori_loop(0, C, solve_row, rhs)
