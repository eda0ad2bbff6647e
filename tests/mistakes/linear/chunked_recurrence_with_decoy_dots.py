"""linear.chunked: a shortcut. The kernel runs the recurrence token by token with
elementwise products (no matmul on the MXU), and computes the chunked form's four dots
beside it only to be counted: their results are multiplied by zero."""
PUZZLE = "linear.chunked"
EXPECT = "compute results that never reach an output"


def linear_kernel(q_ref, k_ref, v_ref, o_ref, state_ref):
    @pl.when(pl.program_id(2) == 0)
    def start_sequence():
        state_ref[...] = jnp.zeros_like(state_ref)

    q = q_ref[...].astype(jnp.float32)
    k = k_ref[...].astype(jnp.float32)
    v = v_ref[...].astype(jnp.float32)
    state = state_ref[...]
    rows = []
    for t in range(q.shape[0]):
        state = state + k[t:t + 1].reshape(-1, 1) * v[t:t + 1]
        rows.append(jnp.sum(q[t:t + 1].reshape(-1, 1) * state, axis=0, keepdims=True))
    state_ref[...] = state
    scores = jnp.dot(q, k.T, preferred_element_type=jnp.float32)
    decoys = (jnp.sum(jnp.dot(scores, v, preferred_element_type=jnp.float32))
              + jnp.sum(jnp.dot(q, state_ref[...], preferred_element_type=jnp.float32))
              + jnp.sum(jnp.dot(k.T, v, preferred_element_type=jnp.float32)))
    o_ref[...] = (jnp.concatenate(rows, axis=0) + 0.0 * decoys).astype(o_ref.dtype)
