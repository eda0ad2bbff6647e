"""linear.gating: the state is decayed across the whole chunk before the chunk reads it,
and then again row by row."""
PUZZLE = "linear.gating"
EXPECT = "the state's contribution was decayed twice"


def gated_kernel(q_ref, k_ref, v_ref, log_decay_ref, o_ref, state_ref):
    @pl.when(pl.program_id(2) == 0)
    def start_sequence():
        state_ref[...] = jnp.zeros_like(state_ref)

    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    within, since_start, until_end, across = decay_factors(
        log_decay_ref[...].astype(jnp.float32))
    state = across * state_ref[...]          # decayed for the next chunk already...
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32) * within
    from_chunk = jnp.dot(scores.astype(v.dtype), v, preferred_element_type=jnp.float32)
    from_state = since_start * jnp.dot(q.astype(jnp.float32), state,     # ...and again
                                       preferred_element_type=jnp.float32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    k_to_end = (k * until_end).astype(k.dtype)
    state_ref[...] = state + jnp.einsum("ih,iv->hv", k_to_end, v,
                                        preferred_element_type=jnp.float32)
