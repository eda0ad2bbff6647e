"""linear.chunked, a shortcut past the bf16 MXU path: every product of the chunked
kernel is a real MXU dot, but on operands cast up to float32 at Precision.HIGHEST (the
MXU's slow multi-pass path); the scores are never rounded to bf16 before scores @ v."""
PUZZLE = "linear.chunked"
EXPECT = "flops' worth of float32 operands that should be bfloat16"


def linear_kernel(q_ref, k_ref, v_ref, o_ref, state_ref):
    @pl.when(pl.program_id(2) == 0)
    def start_sequence():
        state_ref[...] = jnp.zeros_like(state_ref)

    f32, hi = jnp.float32, jax.lax.Precision.HIGHEST
    q, k, v = q_ref[...].astype(f32), k_ref[...].astype(f32), v_ref[...].astype(f32)
    state = state_ref[...]
    scores = jnp.einsum("ih,jh->ij", q, k, precision=hi, preferred_element_type=f32)
    row = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 0)
    col = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)
    scores = jnp.where(col <= row, scores, 0.0)
    from_chunk = jnp.dot(scores, v, precision=hi, preferred_element_type=f32)
    from_state = jnp.dot(q, state, precision=hi, preferred_element_type=f32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    state_ref[...] = state + jnp.einsum("ih,iv->hv", k, v, precision=hi,
                                        preferred_element_type=f32)
