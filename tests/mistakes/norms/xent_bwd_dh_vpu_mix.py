"""xent backward: in the dh kernel, dlogits @ w^T is computed on the VPU (broadcast
multiply, sum over the vocabulary) in float32; the MXU einsum is kept as a decoy mixed
in at 1%. Dodges 'dh accumulates an MXU product per vocabulary block'."""
PUZZLE = "norms.xent_backward"
EXPECT = "in a pattern that is a matrix product"


def cross_entropy_dh_kernel(h_ref, w_ref, labels_ref, lse_ref, dloss_ref, dh_ref,
                            dh_scratch, *, V):
    v = pl.program_id(1)
    block_v = w_ref.shape[1]

    @pl.when(v == 0)
    def start_token_block():
        dh_scratch[...] = jnp.zeros_like(dh_scratch)

    col = v * block_v + jax.lax.broadcasted_iota(jnp.int32, w_ref.shape, 1)
    w = jnp.where(col < V, w_ref[...], 0)
    logits = jnp.dot(h_ref[...], w, preferred_element_type=jnp.float32)
    col = v * block_v + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    p = jnp.exp(logits - lse_ref[...])
    dlogits = (p - (col == labels_ref[...])) * dloss_ref[...]
    mxu = jnp.einsum("tv,dv->td", dlogits.astype(w.dtype), w,
                     preferred_element_type=jnp.float32)
    vpu = jnp.sum(dlogits[:, None, :] * w.astype(jnp.float32)[None, :, :], axis=2)
    dh_scratch[...] += 0.99 * vpu + 0.01 * mxu

    @pl.when(v == pl.num_programs(1) - 1)
    def finish_token_block():
        dh_ref[...] = dh_scratch[...].astype(dh_ref.dtype)
