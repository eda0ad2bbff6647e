"""linear.intra: the causal mask is transposed (col >= row): each query sees the keys
after it and not those before it."""
PUZZLE = "linear.intra"
EXPECT = "the mask is transposed"
AVOID = "only some chunks are wrong"


def intra_chunk_kernel(q_ref, k_ref, v_ref, o_ref):
    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32)
    row = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 0)   # query i
    col = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)   # key j
    scores = jnp.where(col >= row, scores, 0.0)
    o = jnp.dot(scores.astype(v.dtype), v, preferred_element_type=jnp.float32)
    o_ref[...] = o.astype(o_ref.dtype)
