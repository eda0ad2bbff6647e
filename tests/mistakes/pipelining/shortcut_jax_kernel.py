"""pipelining.paged_attention (shortcut): JAX's own Pallas paged attention stands in."""
PUZZLE = "pipelining.paged_attention"
EXPECT = "is not yours"

from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention as jax_paged  # noqa: E402,E501


def paged_attention(q, k_pages, v_pages, lengths, page_indices, *, pages_per_block):
    return jax_paged(q, k_pages, v_pages, lengths, page_indices,
                     pages_per_compute_block=pages_per_block)
