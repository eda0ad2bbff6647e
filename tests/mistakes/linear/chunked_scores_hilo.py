"""chunked, precision dodge: the masked scores are NOT rounded to v's dtype before they
meet v: scores @ v runs on the MXU with the bf16 high part (the counted dot, bf16
operands), and the low part (scores - hi) is added back on the VPU in float32, so the
product is effectively float32. Dodges 'the scores rounded to v's dtype before they
meet v' while every dot still has bf16 operands."""
PUZZLE = "linear.chunked"
EXPECT = "in a pattern that is a matrix product"


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
    hi = scores.astype(v.dtype)
    lo = scores - hi.astype(jnp.float32)
    from_chunk = jnp.dot(hi, v, preferred_element_type=jnp.float32) + jnp.sum(
        lo[:, :, None] * v.astype(jnp.float32)[None, :, :], axis=1)
    from_state = jnp.dot(q.astype(jnp.float32), state, preferred_element_type=jnp.float32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    state_ref[...] = state + jnp.einsum("ih,iv->hv", k, v, preferred_element_type=jnp.float32)
