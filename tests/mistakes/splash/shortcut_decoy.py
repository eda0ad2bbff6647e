"""splash.multihead (shortcut): a real kernel runs; the result comes from plain JAX."""
PUZZLE = "splash.multihead"
EXPECT = "is never used"


def splash_attention(q, k, v, mask, *, sm_scale=None, block_q=128, block_kv=128):
    B, N, T, H = q.shape
    K = k.shape[1]
    scale = 1 / math.sqrt(H) if sm_scale is None else sm_scale
    step = np.zeros((1, 1, 1), np.int32)
    zeros = jnp.zeros((1, 1, 8, H), q.dtype)
    splash_call(zeros, zeros, zeros, step, step + FULL, step, np.ones((1, 8, 8), bool))
    visible = jnp.asarray(np.asarray(mask))
    s = jnp.einsum("bnth,bnsh->bnts", q, jnp.repeat(k, N // K, axis=1),
                   preferred_element_type=jnp.float32) * scale
    p = jnp.where(visible, jnp.exp(s - jnp.max(s, axis=-1, keepdims=True)), 0)
    l = p.sum(axis=-1, keepdims=True)
    o = jnp.einsum("bnts,bnsh->bnth", p / jnp.where(l == 0, 1, l),
                   jnp.repeat(v, N // K, axis=1).astype(jnp.float32))
    return o.astype(q.dtype)
