"""linear.chunked: the state is zeroed at the very first grid step only, so it runs on
from one sequence into the next."""
PUZZLE = "linear.chunked"
EXPECT = "the state is zeroed at the first chunk of every (b, n)"


def linear_kernel(q_ref, k_ref, v_ref, o_ref, state_ref):
    first = (pl.program_id(0) == 0) & (pl.program_id(1) == 0) & (pl.program_id(2) == 0)

    @pl.when(first)
    def start():
        state_ref[...] = jnp.zeros_like(state_ref)

    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    state = state_ref[...]
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32)
    row = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 0)
    col = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)
    scores = jnp.where(col <= row, scores, 0.0)
    from_chunk = jnp.dot(scores.astype(v.dtype), v, preferred_element_type=jnp.float32)
    from_state = jnp.dot(q.astype(jnp.float32), state, preferred_element_type=jnp.float32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    state_ref[...] = state + jnp.einsum("ih,iv->hv", k, v, preferred_element_type=jnp.float32)
