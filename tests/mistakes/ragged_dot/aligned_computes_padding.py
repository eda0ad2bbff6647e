"""ragged_dot.aligned: every step computes, the padding steps past num_tiles too. The
values survive (a padding step repeats the last visit), the work does not."""
PUZZLE = "ragged_dot.aligned"
EXPECT = "Put the dot under @pl.when(visit < num_tiles_ref[0])"


def gmm_aligned_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref,
                       lhs_ref, rhs_ref, out_ref):
    out_ref[...] = jnp.dot(lhs_ref[...], rhs_ref[...],
                           preferred_element_type=jnp.float32).astype(out_ref.dtype)
