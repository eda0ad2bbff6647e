"""norms.xent_backward: dlogits = p * dloss, the -1 at the label's column forgotten."""
PUZZLE = "norms.xent_backward"
EXPECT = "Subtract 1 where the tile's column equals the token's label"


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
    dlogits = jnp.exp(logits - lse_ref[...]) * dloss_ref[...]
    dh_scratch[...] += jnp.einsum("tv,dv->td", dlogits.astype(w.dtype), w,
                                  preferred_element_type=jnp.float32)

    @pl.when(v == pl.num_programs(1) - 1)
    def finish_token_block():
        dh_ref[...] = dh_scratch[...].astype(dh_ref.dtype)


def cross_entropy_dw_kernel(h_ref, w_ref, labels_ref, lse_ref, dloss_ref, dw_ref,
                            dw_scratch, *, T):
    v, t = pl.program_id(0), pl.program_id(1)
    block_t = h_ref.shape[0]

    @pl.when(t == 0)
    def start_vocabulary_block():
        dw_scratch[...] = jnp.zeros_like(dw_scratch)

    row = t * block_t + jax.lax.broadcasted_iota(jnp.int32, h_ref.shape, 0)
    h = jnp.where(row < T, h_ref[...], 0)
    logits = jnp.dot(h, w_ref[...], preferred_element_type=jnp.float32)
    row = t * block_t + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 0)
    dlogits = jnp.where(row < T, jnp.exp(logits - lse_ref[...]) * dloss_ref[...], 0.0)
    dw_scratch[...] += jnp.einsum("td,tv->dv", h, dlogits.astype(h.dtype),
                                  preferred_element_type=jnp.float32)

    @pl.when(t == pl.num_programs(1) - 1)
    def finish_vocabulary_block():
        dw_ref[...] = dw_scratch[...].astype(dw_ref.dtype)
