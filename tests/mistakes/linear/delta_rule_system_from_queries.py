"""linear.delta_rule: L made from q_i . k_j, not k_i . k_j."""
PUZZLE = "linear.delta_rule"
EXPECT = "L was made from the queries"


def delta_kernel(q_ref, k_ref, v_ref, beta_ref, o_ref, state_ref):
    @pl.when(pl.program_id(2) == 0)
    def start_sequence():
        state_ref[...] = jnp.zeros_like(state_ref)

    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    state = state_ref[...]
    beta = beta_ref[...].astype(jnp.float32)                     # (C, 1)
    row = jax.lax.broadcasted_iota(jnp.int32, (q.shape[0], q.shape[0]), 0)
    col = jax.lax.broadcasted_iota(jnp.int32, (q.shape[0], q.shape[0]), 1)
    # Row i writes u_i = beta_i (v_i - k_i S_{i-1}), and S_{i-1} = S + sum_{j<i} k_j^T u_j:
    #     (I + L) u = beta (V - K S),    L_ij = beta_i k_i . k_j  for j < i.
    keys = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32)
    lower = jnp.where(col < row, beta * keys, 0.0)
    predicted = jnp.dot(k.astype(jnp.float32), state, preferred_element_type=jnp.float32)
    u = forward_substitution(lower, beta * (v.astype(jnp.float32) - predicted))
    # From here on, linear attention with the values u.
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32)
    scores = jnp.where(col <= row, scores, 0.0)
    from_chunk = jnp.dot(scores.astype(v.dtype), u.astype(v.dtype),
                         preferred_element_type=jnp.float32)
    from_state = jnp.dot(q.astype(jnp.float32), state, preferred_element_type=jnp.float32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    state_ref[...] = state + jnp.einsum("ih,iv->hv", k, u.astype(k.dtype),
                                        preferred_element_type=jnp.float32)
