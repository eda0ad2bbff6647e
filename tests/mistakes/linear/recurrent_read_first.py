"""linear.recurrent: each output is read before its own token is written into the state."""
PUZZLE = "linear.recurrent"
EXPECT = "Update the state first, then read q_t S"


def recurrent(q, k, v, log_decay=None, beta=None):
    B, N, T, H = q.shape
    Hv = v.shape[-1]
    if log_decay is None:
        log_decay = jnp.zeros((B, N, T), jnp.float32)

    def step(state, token):
        q_t, k_t, v_t, a_t, beta_t = token
        state = jnp.exp(a_t)[..., None, None] * state
        o_t = jnp.einsum("bnh,bnhv->bnv", q_t, state)
        if beta is None:
            write = v_t
        else:
            write = beta_t[..., None] * (v_t - jnp.einsum("bnh,bnhv->bnv", k_t, state))
        return state + k_t[..., :, None] * write[..., None, :], o_t

    def time_major(x):
        return None if x is None else jnp.moveaxis(x.astype(jnp.float32), 2, 0)

    tokens = tuple(time_major(x) for x in (q, k, v, log_decay, beta))
    _, o = jax.lax.scan(step, jnp.zeros((B, N, H, Hv), jnp.float32), tokens)
    return jnp.moveaxis(o, 0, 2).astype(q.dtype)
