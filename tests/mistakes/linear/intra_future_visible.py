"""linear.intra: no causal mask inside the chunk: every query sees the chunk's future."""
PUZZLE = "linear.intra"
EXPECT = "every query saw the whole chunk, its future included"


def intra_chunk_kernel(q_ref, k_ref, v_ref, o_ref):
    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32)
    o = jnp.dot(scores.astype(v.dtype), v, preferred_element_type=jnp.float32)
    o_ref[...] = o.astype(o_ref.dtype)
