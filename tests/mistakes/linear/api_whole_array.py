"""linear.api (shortcut): gated_linear_attention as one kernel step over everything: the
recurrence token by token in a loop, every head in the one step, no chunks and no grid."""
PUZZLE = "linear.api"
EXPECT = "runs once, over the whole array"


def gated_linear_attention(q, k, v, log_decay, *, chunk=64):
    B, N, T, H = q.shape
    Hv = v.shape[-1]

    def kernel(q_ref, k_ref, v_ref, g_ref, o_ref):
        for b in range(B):
            for n in range(N):
                def step(t, state, b=b, n=n):
                    q_t = q_ref[b, n, pl.ds(t, 1), :].astype(jnp.float32)
                    k_t = k_ref[b, n, pl.ds(t, 1), :].astype(jnp.float32)
                    v_t = v_ref[b, n, pl.ds(t, 1), :].astype(jnp.float32)
                    decay = jnp.exp(g_ref[b, n, pl.ds(t, 1), :])
                    state = decay * state + jnp.dot(k_t.T, v_t,
                                                    preferred_element_type=jnp.float32)
                    o_ref[b, n, pl.ds(t, 1), :] = jnp.dot(
                        q_t, state, preferred_element_type=jnp.float32).astype(o_ref.dtype)
                    return state

                jax.lax.fori_loop(0, T, step, jnp.zeros((H, Hv), jnp.float32))

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(v.shape, q.dtype))(
        q, k, v, log_decay.astype(jnp.float32).reshape(B, N, T, 1))
