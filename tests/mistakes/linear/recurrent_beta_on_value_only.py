"""linear.recurrent: the write is beta v - k S: beta on the value only, not the whole error."""
PUZZLE = "linear.recurrent"
EXPECT = "beta scaled only the value, not the erase"


def recurrent(q, k, v, log_decay=None, beta=None):
    B, N, T, H = q.shape
    Hv = v.shape[-1]
    f32 = jnp.float32
    if log_decay is None:   # no gating: g_t = exp(0) = 1
        log_decay = jnp.zeros((B, N, T), f32)

    def step(state, token):
        q_t, k_t, v_t, a_t, beta_t = token           # [B, N, H], ..., [B, N] per step
        state = jnp.exp(a_t)[..., None, None] * state    # g_t S_{t-1}
        if beta is None:
            write = v_t
        else:   # the delta rule writes beta_t times what the decayed state got wrong
            write = beta_t[..., None] * v_t - jnp.einsum("bnh,bnhv->bnv", k_t, state)
        state = state + k_t[..., :, None] * write[..., None, :]   # + k_t^T write
        return state, jnp.einsum("bnh,bnhv->bnv", q_t, state)     # o_t = q_t S_t

    def time_major(x):
        return None if x is None else jnp.moveaxis(x.astype(f32), 2, 0)

    tokens = tuple(time_major(x) for x in (q, k, v, log_decay, beta))
    _, o = jax.lax.scan(step, jnp.zeros((B, N, H, Hv), f32), tokens)
    return jnp.moveaxis(o, 0, 2).astype(q.dtype)
