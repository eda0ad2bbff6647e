"""linear.chunked: the state is read with the chunk's keys, K S, instead of Q S."""
PUZZLE = "linear.chunked"
EXPECT = "the state was read with the chunk's keys, K S"
AVOID = "what one step hands to the next"


def linear_kernel(q_ref, k_ref, v_ref, o_ref, state_ref):
    @pl.when(pl.program_id(2) == 0)
    def start_sequence():
        state_ref[...] = jnp.zeros_like(state_ref)

    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    state = state_ref[...]
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32)
    row = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 0)
    col = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)
    scores = jnp.where(col <= row, scores, 0.0)
    from_chunk = jnp.dot(scores.astype(v.dtype), v, preferred_element_type=jnp.float32)
    from_state = jnp.dot(k.astype(jnp.float32), state, preferred_element_type=jnp.float32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    state_ref[...] = state + jnp.einsum("ih,iv->hv", k, v, preferred_element_type=jnp.float32)
