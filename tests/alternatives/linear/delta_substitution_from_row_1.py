"""linear.delta_rule with forward substitution from row 1: row 0 of a strictly lower
system has nothing to subtract, so its right-hand side is already its solution, and
the loop skips one (1, C) @ (C, Hv) product per chunk."""
PUZZLE = "linear.delta_rule"


def forward_substitution(lower, rhs):
    """u (C, W) with (I + lower) u = rhs, for a strictly lower-triangular lower (C, C):
    row i of u is rhs_i - lower_i @ u, once rows 0 .. i - 1 of u are final."""
    C = lower.shape[0]
    row = jax.lax.broadcasted_iota(jnp.int32, lower.shape, 0)
    rows = jax.lax.broadcasted_iota(jnp.int32, (C, 1), 0)

    def solve_row(i, u):
        lower_i = jnp.sum(jnp.where(row == i, lower, 0.0), axis=0, keepdims=True)  # (1, C)
        solved = u - jnp.dot(lower_i, u, preferred_element_type=jnp.float32)
        return jnp.where(rows == i, solved, u)           # only row i changes

    return jax.lax.fori_loop(1, C, solve_row, rhs)
