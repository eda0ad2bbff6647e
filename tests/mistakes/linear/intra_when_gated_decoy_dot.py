"""A shortcut: both products of the chunk are done on
the vector unit and stored; the MXU dots run on q, k, v as they are, and their result is
stored under a pl.when whose data-dependent condition (some |value| > 1e30) never holds:
the dots 'can' reach the output, and never do."""
PUZZLE = "linear.intra"
EXPECT = 'do not move the output'


def vpu_mm(a, b):
    return jnp.sum(a.astype(jnp.float32)[:, :, None] * b.astype(jnp.float32)[None, :, :],
                   axis=1)


def intra_chunk_kernel(q_ref, k_ref, v_ref, o_ref):
    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    row = jax.lax.broadcasted_iota(jnp.int32, (q.shape[0], q.shape[0]), 0)
    col = jax.lax.broadcasted_iota(jnp.int32, (q.shape[0], q.shape[0]), 1)
    scores = jnp.where(col <= row, vpu_mm(q, k.T), 0.0)
    o_ref[...] = vpu_mm(scores, v).astype(o_ref.dtype)

    mxu_scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32)
    mxu_scores = jnp.where(col <= row, mxu_scores, 0.0)
    mxu = jnp.dot(mxu_scores.astype(v.dtype), v, preferred_element_type=jnp.float32)

    @pl.when(jnp.max(jnp.abs(mxu)) > 1e30)
    def never():
        o_ref[...] = mxu.astype(o_ref.dtype)
