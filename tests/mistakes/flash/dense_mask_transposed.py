"""flash.dense: the causal mask keeps j >= i (the transpose of j <= i)."""
PUZZLE = "flash.dense"
EXPECT = "your causal mask is the wrong way round"

def attention(q, k, v, *, causal=False, sm_scale=None):
    B, N, T, H = q.shape
    K, S = k.shape[1], k.shape[2]
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    k = jnp.repeat(k, N // K, axis=1)
    v = jnp.repeat(v, N // K, axis=1)
    s = jnp.einsum("bnth,bnsh->bnts", q, k, preferred_element_type=jnp.float32) * sm_scale
    if causal:
        visible = jnp.arange(S)[None, :] >= jnp.arange(T)[:, None]
        s = jnp.where(visible, s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bnts,bnsh->bnth", p, v, preferred_element_type=jnp.float32)
    return o.astype(q.dtype)

