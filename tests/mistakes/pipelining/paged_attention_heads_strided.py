"""pipelining.paged_attention: q reshaped to [B, G, K, H], so K/V head h gets query heads
h, h + K, h + 2K... (n % K) instead of its group h * G ... h * G + G - 1."""
PUZZLE = "pipelining.paged_attention"
EXPECT = "query head n read K/V head n % K"


def paged_attention(q, k_pages, v_pages, lengths, page_indices, *, pages_per_block):
    if q.ndim != 3:
        raise ValueError(f"paged_attention: q must be [B, N, H], got shape {q.shape}")
    if k_pages.ndim != 4 or k_pages.shape != v_pages.shape:
        raise ValueError(f"paged_attention: k_pages and v_pages must both be [K, P, L, H], "
                         f"got {k_pages.shape} and {v_pages.shape}")
    B, N, H = q.shape
    K, P, L, H_kv = k_pages.shape
    if H_kv != H:
        raise ValueError(f"paged_attention: q has H={H} but the pages have H={H_kv}")
    if N % K:
        raise ValueError(f"paged_attention: N={N} query heads must be a multiple of the "
                         f"K={K} K/V heads")
    if q.dtype != k_pages.dtype or k_pages.dtype != v_pages.dtype:
        raise ValueError(f"paged_attention: q, k_pages and v_pages must share one dtype, got "
                         f"{q.dtype}, {k_pages.dtype}, {v_pages.dtype}")
    if lengths.shape != (B,) or lengths.dtype != jnp.int32:
        raise ValueError(f"paged_attention: lengths must be int32 [B={B}], got "
                         f"{lengths.dtype} {lengths.shape}")
    if page_indices.ndim != 2 or page_indices.shape[0] != B or page_indices.dtype != jnp.int32:
        raise ValueError(f"paged_attention: page_indices must be int32 [B={B}, "
                         f"pages_per_sequence], got {page_indices.dtype} {page_indices.shape}")
    pages_per_sequence = page_indices.shape[1]
    if pages_per_block < 1 or pages_per_sequence % pages_per_block:
        raise ValueError(f"paged_attention: pages_per_sequence={pages_per_sequence} must be a "
                         f"multiple of pages_per_block={pages_per_block}")
    G = N // K
    group = pl.BlockSpec((None, G, None, H), lambda b, h, lengths, pages: (b, 0, h, 0))
    pages_buffer = pltpu.VMEM((2, pages_per_block, L, H), k_pages.dtype)   # two slots
    out = pl.pallas_call(
        functools.partial(paged_attention_kernel, pages_per_block=pages_per_block,
                          pages_per_sequence=pages_per_sequence),
        out_shape=jax.ShapeDtypeStruct((B, G, K, H), q.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,                    # lengths and the page table, in SMEM
            grid=(B, K),
            in_specs=[group, pl.BlockSpec(memory_space=pl.ANY),
                      pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=group,
            scratch_shapes=[pages_buffer, pages_buffer, pltpu.SemaphoreType.DMA((2,))]),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(lengths, page_indices.reshape(-1), q.reshape(B, G, K, H), k_pages, v_pages)
    return out.reshape(B, N, H)
