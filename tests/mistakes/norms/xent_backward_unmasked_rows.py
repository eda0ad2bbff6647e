"""norms.xent_backward: the dw kernel lets the garbage rows past T (NaN in interpret
mode) into its dot: 0 * NaN is NaN."""
PUZZLE = "norms.xent_backward"
EXPECT = "Zero them in h and in dlogits"


def cross_entropy_dw_kernel(h_ref, w_ref, labels_ref, lse_ref, dloss_ref, dw_ref,
                            dw_scratch, *, T):
    v, t = pl.program_id(0), pl.program_id(1)
    block_v = w_ref.shape[1]

    @pl.when(t == 0)
    def start_vocabulary_block():
        dw_scratch[...] = jnp.zeros_like(dw_scratch)

    h = h_ref[...]
    logits = jnp.dot(h, w_ref[...], preferred_element_type=jnp.float32)
    col = v * block_v + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    dlogits = (jnp.exp(logits - lse_ref[...]) - (col == labels_ref[...])) * dloss_ref[...]
    dw_scratch[...] += jnp.einsum("td,tv->dv", h, dlogits.astype(h.dtype),
                                  preferred_element_type=jnp.float32)

    @pl.when(t == pl.num_programs(1) - 1)
    def finish_vocabulary_block():
        dw_ref[...] = dw_scratch[...].astype(dw_ref.dtype)
