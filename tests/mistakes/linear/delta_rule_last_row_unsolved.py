"""linear.delta_rule: forward_substitution's loop stops a row short, fori_loop(0, C - 1):
the last row of every chunk keeps its right-hand side."""
PUZZLE = "linear.delta_rule"
EXPECT = "the last row of every chunk kept its right-hand side"


def forward_substitution(lower, rhs):
    C = lower.shape[0]
    row = jax.lax.broadcasted_iota(jnp.int32, lower.shape, 0)
    rows = jax.lax.broadcasted_iota(jnp.int32, (C, 1), 0)

    def solve_row(i, u):
        lower_i = jnp.sum(jnp.where(row == i, lower, 0.0), axis=0, keepdims=True)  # (1, C)
        solved = u - jnp.dot(lower_i, u, preferred_element_type=jnp.float32)
        return jnp.where(rows == i, solved, u)           # only row i changes

    return jax.lax.fori_loop(0, C - 1, solve_row, rhs)
