"""splash.skip_empty: online_softmax_step: hidden scores set to MASK_VALUE but p not zeroed where hidden (a row with no visible key in the chunk adds exp(0) = 1 per key)."""
PUZZLE = "splash.skip_empty"
EXPECT = "a row that sees no key got the mean of v"


def online_softmax_step(m, l, acc, s, v, visible=None):
    """flash.online's step, with a mask: fold a chunk of scores s [R, C] and values
    v [C, H] into the running max m [R, 1], sum l [R, 1] and accumulator acc [R, H].

    visible [R, C] (bool, optional): which scores count. A hidden score adds nothing,
    not even to a row that has no visible key in this chunk."""
    if visible is not None:
        s = jnp.where(visible, s, MASK_VALUE)
    m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
    alpha = jnp.exp(m - m_new)          # converts sums taken against m to m_new
    p = jnp.exp(s - m_new)
    l_new = alpha * l + jnp.sum(p, axis=-1, keepdims=True)
    acc_new = alpha * acc + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return m_new, l_new, acc_new
