"""flash.online: l and acc keep sums taken against an older max (no alpha)."""
PUZZLE = "flash.online"
EXPECT = "multiply both by alpha = exp(m - m_new)"


def online_softmax_step(m, l, acc, s, v):
    m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
    p = jnp.exp(s - m_new)
    l_new = l + jnp.sum(p, axis=-1, keepdims=True)
    acc_new = acc + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return m_new, l_new, acc_new
