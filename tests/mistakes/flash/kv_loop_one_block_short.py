"""flash.kv_loop: the fori_loop runs S // block_kv - 1 times: the last KV block is dropped."""
PUZZLE = "flash.kv_loop"
EXPECT = "the loop stops one block short"

def one_head_kernel(q_ref, k_ref, v_ref, o_ref, *, sm_scale, block_kv):
    block_q, H = q_ref.shape
    q = q_ref[...]
    def fold_kv_block(j, carry):
        start = pl.multiple_of(j * block_kv, block_kv)
        k = k_ref[pl.ds(start, block_kv), :]
        v = v_ref[pl.ds(start, block_kv), :]
        s = jnp.einsum("qh,kh->qk", q, k, preferred_element_type=jnp.float32) * sm_scale
        return online_softmax_step(*carry, s, v)
    start = (jnp.full((block_q, 1), -jnp.inf, jnp.float32), jnp.zeros((block_q, 1), jnp.float32),
             jnp.zeros((block_q, H), jnp.float32))
    m, l, acc = jax.lax.fori_loop(0, k_ref.shape[0] // block_kv - 1, fold_kv_block, start)
    o_ref[...] = (acc / l).astype(o_ref.dtype)

