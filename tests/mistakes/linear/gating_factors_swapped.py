"""linear.gating: decay_factors' outputs unpacked in another order, until_end in
since_start's place and since_start in until_end's."""
PUZZLE = "linear.gating"
EXPECT = "since_start and until_end were unpacked in each other's place"


def gated_kernel(q_ref, k_ref, v_ref, log_decay_ref, o_ref, state_ref):
    @pl.when(pl.program_id(2) == 0)
    def start_sequence():
        state_ref[...] = jnp.zeros_like(state_ref)

    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    state = state_ref[...]
    within, until_end, since_start, across = decay_factors(
        log_decay_ref[...].astype(jnp.float32))
    # The decay mask is also the causal mask: within is 0 above the diagonal.
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32) * within
    from_chunk = jnp.dot(scores.astype(v.dtype), v, preferred_element_type=jnp.float32)
    from_state = since_start * jnp.dot(q.astype(jnp.float32), state,
                                       preferred_element_type=jnp.float32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    k_to_end = (k * until_end).astype(k.dtype)       # token j's write, decayed to the end
    state_ref[...] = across * state + jnp.einsum("ih,iv->hv", k_to_end, v,
                                                 preferred_element_type=jnp.float32)
