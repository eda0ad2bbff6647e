"""linear.chunked: the chunk's K^T V is subtracted from the state, so every state handed
on is minus the right one: the error is a read of the right state, but the read is right."""
PUZZLE = "linear.chunked"
EXPECT = "an update subtracted gives -1"
AVOID = "as a wrong read of the right state would"


def linear_kernel(q_ref, k_ref, v_ref, o_ref, state_ref):
    @pl.when(pl.program_id(2) == 0)
    def start_sequence():
        state_ref[...] = jnp.zeros_like(state_ref)

    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    state = state_ref[...]                              # S before this chunk, float32
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32)
    row = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 0)   # query i
    col = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)   # key j
    scores = jnp.where(col <= row, scores, 0.0)
    from_chunk = jnp.dot(scores.astype(v.dtype), v, preferred_element_type=jnp.float32)
    # The state is read in float32 (q cast up, never S cast down): its low bits are what
    # the latest chunks added.
    from_state = jnp.dot(q.astype(jnp.float32), state, preferred_element_type=jnp.float32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    # Only now the chunk joins the state: S + K^T V, for the chunks after this one.
    state_ref[...] = state - jnp.einsum("ih,iv->hv", k, v, preferred_element_type=jnp.float32)
