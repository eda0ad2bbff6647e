"""flash.dense: divides the scores by H instead of sqrt(H)."""
PUZZLE = "flash.dense"
EXPECT = "your scores look scaled by 1 / H"


def attention(q, k, v, *, causal=False, sm_scale=None):
    B, N, T, H = q.shape
    K, S = k.shape[1], k.shape[2]
    if sm_scale is None:
        sm_scale = 1 / H
    k = jnp.repeat(k, N // K, axis=1)   # query head n reads K/V head n // (N // K)
    v = jnp.repeat(v, N // K, axis=1)
    s = jnp.einsum("bnth,bnsh->bnts", q, k, preferred_element_type=jnp.float32) * sm_scale
    if causal:  # top-left aligned: query i sees keys 0..i
        visible = jnp.arange(S)[None, :] <= jnp.arange(T)[:, None]
        s = jnp.where(visible, s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bnts,bnsh->bnth", p, v, preferred_element_type=jnp.float32)
    return o.astype(q.dtype)
