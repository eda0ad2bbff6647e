"""ragged_dot.masked: each visit stores its whole tile; in a shared tile the last
group's expert overwrites the rows of the groups before it."""
PUZZLE = "ragged_dot.masked"
EXPECT = "the last visit's expert wins on every row"


def gmm_masked_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref,
                      lhs_ref, rhs_ref, out_ref, *, tm):
    @pl.when(pl.program_id(1) < num_tiles_ref[0])
    def compute_tile():
        out_ref[...] = jnp.dot(lhs_ref[...], rhs_ref[...],
                               preferred_element_type=jnp.float32).astype(out_ref.dtype)
