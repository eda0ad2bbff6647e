"""linear.gating: S lives in a float32 scratch, but its update is done in the inputs' dtype:
the decayed state and the chunk's write are rounded to bf16 and added in bf16, then cast
back up to be stored. S holds a large part the outputs never see, and bf16 keeps only its
top bits: the same loss as a bf16 state, in a float32 buffer."""
PUZZLE = "linear.gating"
EXPECT = "state_ref is float32, but its update is computed in bfloat16"


def gated_kernel(q_ref, k_ref, v_ref, log_decay_ref, o_ref, state_ref):
    @pl.when(pl.program_id(2) == 0)
    def start_sequence():
        state_ref[...] = jnp.zeros_like(state_ref)

    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    state = state_ref[...]
    within, since_start, until_end, across = decay_factors(
        log_decay_ref[...].astype(jnp.float32))
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32) * within
    from_chunk = jnp.dot(scores.astype(v.dtype), v, preferred_element_type=jnp.float32)
    from_state = since_start * jnp.dot(q.astype(jnp.float32), state,
                                       preferred_element_type=jnp.float32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    k_to_end = (k * until_end).astype(k.dtype)
    write = jnp.einsum("ih,iv->hv", k_to_end, v, preferred_element_type=jnp.float32)
    narrow = (across * state).astype(v.dtype) + write.astype(v.dtype)
    state_ref[...] = narrow.astype(jnp.float32)
