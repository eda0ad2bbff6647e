"""norms.xent_backward: the dw kernel masks the garbage tokens, but builds the row
index from pl.program_id(0), the vocabulary axis of its (v, t) grid."""
PUZZLE = "norms.xent_backward"
EXPECT = "Is the token mask built from the token axis's id?"
AVOID = "Zero them in h and in dlogits before h^T"


def cross_entropy_dw_kernel(h_ref, w_ref, labels_ref, lse_ref, dloss_ref, dw_ref,
                            dw_scratch, *, T):
    v, t = pl.program_id(0), pl.program_id(1)
    block_t, block_v = h_ref.shape[0], w_ref.shape[1]

    @pl.when(t == 0)
    def start_vocabulary_block():
        dw_scratch[...] = jnp.zeros_like(dw_scratch)

    row = v * block_t + jax.lax.broadcasted_iota(jnp.int32, h_ref.shape, 0)
    h = jnp.where(row < T, h_ref[...], 0)
    logits = jnp.dot(h, w_ref[...], preferred_element_type=jnp.float32)
    col = v * block_v + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    row = v * block_t + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 0)
    p = jnp.exp(logits - lse_ref[...])
    dlogits = jnp.where(row < T, (p - (col == labels_ref[...])) * dloss_ref[...], 0.0)
    dw_scratch[...] += jnp.einsum("td,tv->dv", h, dlogits.astype(h.dtype),
                                  preferred_element_type=jnp.float32)

    @pl.when(t == pl.num_programs(1) - 1)
    def finish_vocabulary_block():
        dw_ref[...] = dw_scratch[...].astype(dw_ref.dtype)
