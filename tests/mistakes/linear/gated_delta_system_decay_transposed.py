"""linear.gated_delta: L decayed by within.T, which is 0 below the diagonal: L is all zeros,
as if the system were never solved."""
PUZZLE = "linear.gated_delta"
EXPECT = "is L nonzero below the diagonal"


def gated_delta_kernel(q_ref, k_ref, v_ref, beta_ref, log_decay_ref, o_ref, state_ref):
    @pl.when(pl.program_id(2) == 0)
    def start_sequence():
        state_ref[...] = jnp.zeros_like(state_ref)

    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    state = state_ref[...]
    beta = beta_ref[...].astype(jnp.float32)
    within, since_start, until_end, across = decay_factors(
        log_decay_ref[...].astype(jnp.float32))
    # Row i erases from the state as it is at step i: S decayed by exp(b_i), and every
    # earlier write u_j decayed by exp(b_i - b_j). Strictly below the diagonal: j < i.
    row = jax.lax.broadcasted_iota(jnp.int32, within.shape, 0)
    col = jax.lax.broadcasted_iota(jnp.int32, within.shape, 1)
    keys = jnp.einsum("ih,jh->ij", k, k, preferred_element_type=jnp.float32)
    lower = jnp.where(col < row, beta * keys * within.T, 0.0)
    predicted = since_start * jnp.dot(k.astype(jnp.float32), state,
                                      preferred_element_type=jnp.float32)
    u = forward_substitution(lower, beta * (v.astype(jnp.float32) - predicted))
    # From here on, gated linear attention with the values u.
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32) * within
    from_chunk = jnp.dot(scores.astype(v.dtype), u.astype(v.dtype),
                         preferred_element_type=jnp.float32)
    from_state = since_start * jnp.dot(q.astype(jnp.float32), state,
                                       preferred_element_type=jnp.float32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    k_to_end = (k * until_end).astype(k.dtype)
    state_ref[...] = across * state + jnp.einsum("ih,iv->hv", k_to_end, u.astype(k.dtype),
                                                 preferred_element_type=jnp.float32)
