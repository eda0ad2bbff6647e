"""pipelining.paged_attention (shortcut): the kernel runs; the result comes from jnp."""
PUZZLE = "pipelining.paged_attention"
EXPECT = "is never used"


def paged_attention(q, k_pages, v_pages, lengths, page_indices, *, pages_per_block):
    B, N, H = q.shape
    K, _, L, _ = k_pages.shape
    pages_per_block_ = pages_per_block
    decoy = pl.pallas_call(
        functools.partial(paged_attention_kernel, pages_per_block=pages_per_block_,
                          pages_per_sequence=page_indices.shape[1]),
        out_shape=jax.ShapeDtypeStruct((B, K, N // K, H), q.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, grid=(B, K),
            in_specs=[pl.BlockSpec((None, None, N // K, H), lambda b, h, *_: (b, h, 0, 0)),
                      pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((None, None, N // K, H), lambda b, h, *_: (b, h, 0, 0)),
            scratch_shapes=[pltpu.VMEM((2, pages_per_block, L, H), k_pages.dtype),
                            pltpu.VMEM((2, pages_per_block, L, H), k_pages.dtype),
                            pltpu.SemaphoreType.DMA((2,))]),
    )(lengths, page_indices.reshape(-1), q.reshape(B, K, N // K, H), k_pages, v_pages)
    del decoy
    k = k_pages[:, page_indices].reshape(K, B, -1, H).astype(jnp.float32)
    v = v_pages[:, page_indices].reshape(K, B, -1, H).astype(jnp.float32)
    heads = jnp.arange(N) // (N // K)
    s = jnp.einsum("bnh,nbth->bnt", q.astype(jnp.float32), k[heads])
    visible = jnp.arange(s.shape[-1])[None, None, :] < lengths[:, None, None]
    p = jax.nn.softmax(jnp.where(visible, s, -jnp.inf), axis=-1)
    p = jnp.where(visible, p, 0.0)
    return jnp.einsum("bnt,nbth->bnh", p, v[heads]).astype(q.dtype)
