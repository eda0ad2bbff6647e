"""flash.kv_loop with the loop over KV blocks written as a Python loop (unrolled at
trace time: the number of blocks is static), static slices instead of pl.ds, the dot
as lax.dot_general contracting both operands' last dims, and the running state kept in
plain Python variables."""
PUZZLE = "flash.kv_loop"

QK_T = (((1,), (1,)), ((), ()))


def one_head_kernel(q_ref, k_ref, v_ref, o_ref, *, sm_scale, block_kv):
    block_q, H = q_ref.shape
    q = q_ref[...]
    m = jnp.full((block_q, 1), -jnp.inf, jnp.float32)
    l = jnp.zeros((block_q, 1), jnp.float32)
    acc = jnp.zeros((block_q, H), jnp.float32)
    for start in range(0, k_ref.shape[0], block_kv):
        k = k_ref[start:start + block_kv, :]
        v = v_ref[start:start + block_kv, :]
        s = sm_scale * jax.lax.dot_general(q, k, QK_T, preferred_element_type=jnp.float32)
        m_next = jnp.maximum(m, s.max(axis=1, keepdims=True))
        p = jnp.exp(s - m_next)
        correction = jnp.exp(m - m_next)
        l = correction * l + p.sum(axis=1, keepdims=True)
        acc = correction * acc + jax.lax.dot_general(
            p.astype(v.dtype), v, (((1,), (0,)), ((), ())),
            preferred_element_type=jnp.float32)
        m = m_next
    o_ref[...] = (acc * (1.0 / l)).astype(o_ref.dtype)
