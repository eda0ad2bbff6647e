"""intra chunk: q k^T and scores @ v computed on the VPU in float32 (broadcast multiply
and sum); the two MXU dots of the lesson are kept as decoys mixed in at 1%. Dodges 'one
chunk as matmuls' (and the bf16 operands of the MXU)."""
PUZZLE = "linear.intra"
EXPECT = "in a pattern that is a matrix product"


def intra_chunk_kernel(q_ref, k_ref, v_ref, o_ref):
    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    qf, kf, vf = (a.astype(jnp.float32) for a in (q, k, v))
    row = jax.lax.broadcasted_iota(jnp.int32, (q.shape[0], k.shape[0]), 0)
    col = jax.lax.broadcasted_iota(jnp.int32, (q.shape[0], k.shape[0]), 1)
    s_vpu = jnp.where(col <= row, jnp.sum(qf[:, None, :] * kf[None, :, :], axis=2), 0.0)
    s_mxu = jnp.where(col <= row, jnp.einsum("ih,jh->ij", q, k,
                                             preferred_element_type=jnp.float32), 0.0)
    o_vpu = jnp.sum(s_vpu[:, :, None] * vf[None, :, :], axis=1)
    o_mxu = jnp.dot(s_mxu.astype(v.dtype), v, preferred_element_type=jnp.float32)
    o_ref[...] = (0.99 * o_vpu + 0.01 * o_mxu).astype(o_ref.dtype)
