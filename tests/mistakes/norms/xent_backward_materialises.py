"""norms.xent_backward: the dh kernel also writes its tiles of dlogits to a [T, V]
array in HBM, and the dw kernel reads them back instead of recomputing the logits."""
PUZZLE = "norms.xent_backward"
EXPECT = "dlogits or the probabilities written to HBM for another kernel to read"


def _dh_and_dlogits_kernel(h_ref, w_ref, labels_ref, lse_ref, dloss_ref, dh_ref,
                           dlogits_ref, dh_scratch, *, V):
    v = pl.program_id(1)
    block_v = w_ref.shape[1]

    @pl.when(v == 0)
    def start_token_block():
        dh_scratch[...] = jnp.zeros_like(dh_scratch)

    col = v * block_v + jax.lax.broadcasted_iota(jnp.int32, w_ref.shape, 1)
    w = jnp.where(col < V, w_ref[...], 0)
    logits = jnp.dot(h_ref[...], w, preferred_element_type=jnp.float32)
    col = v * block_v + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    dlogits = (jnp.exp(logits - lse_ref[...]) - (col == labels_ref[...])) * dloss_ref[...]
    dlogits_ref[...] = dlogits
    dh_scratch[...] += jnp.einsum("tv,dv->td", dlogits.astype(w.dtype), w,
                                  preferred_element_type=jnp.float32)

    @pl.when(v == pl.num_programs(1) - 1)
    def finish_token_block():
        dh_ref[...] = dh_scratch[...].astype(dh_ref.dtype)


def _dw_from_dlogits_kernel(h_ref, dlogits_ref, dw_ref, dw_scratch, *, T):
    t = pl.program_id(1)
    block_t = h_ref.shape[0]

    @pl.when(t == 0)
    def start_vocabulary_block():
        dw_scratch[...] = jnp.zeros_like(dw_scratch)

    row = t * block_t + jax.lax.broadcasted_iota(jnp.int32, h_ref.shape, 0)
    h = jnp.where(row < T, h_ref[...], 0)
    row = t * block_t + jax.lax.broadcasted_iota(jnp.int32, dlogits_ref.shape, 0)
    dlogits = jnp.where(row < T, dlogits_ref[...], 0.0)
    dw_scratch[...] += jnp.einsum("td,tv->dv", h, dlogits.astype(h.dtype),
                                  preferred_element_type=jnp.float32)

    @pl.when(t == pl.num_programs(1) - 1)
    def finish_vocabulary_block():
        dw_ref[...] = dw_scratch[...].astype(dw_ref.dtype)


def cross_entropy_backward(h, w, labels, lse, dloss, *, block_t=128, block_v=512):
    (T, D), V = h.shape, w.shape[1]
    labels, dloss = labels.reshape(T, 1), dloss.reshape(T, 1).astype(jnp.float32)
    num_t, num_v = pl.cdiv(T, block_t), pl.cdiv(V, block_v)
    per_token = pl.BlockSpec((block_t, 1), lambda t, v: (t, 0))
    tokens = pl.BlockSpec((block_t, D), lambda t, v: (t, 0))
    tile = pl.BlockSpec((block_t, block_v), lambda t, v: (t, v))
    dh, dlogits = pl.pallas_call(
        functools.partial(_dh_and_dlogits_kernel, V=V),
        out_shape=[jax.ShapeDtypeStruct(h.shape, h.dtype),
                   jax.ShapeDtypeStruct((T, V), jnp.float32)],
        grid=(num_t, num_v),
        in_specs=[tokens, pl.BlockSpec((D, block_v), lambda t, v: (0, v)), per_token,
                  per_token, per_token],
        out_specs=[tokens, tile],
        scratch_shapes=[pltpu.VMEM((block_t, D), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(h, w, labels, lse, dloss)
    dw = pl.pallas_call(
        functools.partial(_dw_from_dlogits_kernel, T=T),
        out_shape=jax.ShapeDtypeStruct(w.shape, w.dtype),
        grid=(num_v, num_t),
        in_specs=[pl.BlockSpec((block_t, D), lambda v, t: (t, 0)),
                  pl.BlockSpec((block_t, block_v), lambda v, t: (t, v))],
        out_specs=pl.BlockSpec((D, block_v), lambda v, t: (0, v)),
        scratch_shapes=[pltpu.VMEM((D, block_v), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(h, dlogits)
    return dh, dw
