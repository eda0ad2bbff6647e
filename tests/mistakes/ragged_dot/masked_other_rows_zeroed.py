"""ragged_dot.masked: the mask is right, but the rows that are not the visit's are
stored as zeros instead of kept: in a shared tile, the later visit wipes the rows the
earlier one stored."""
PUZZLE = "ragged_dot.masked"
EXPECT = "a later visit wrote zeros over the rows an earlier visit had stored"


def gmm_masked_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref,
                      lhs_ref, rhs_ref, out_ref, *, tm):
    visit = pl.program_id(1)

    @pl.when(visit < num_tiles_ref[0])
    def compute_tile():
        product = jnp.dot(lhs_ref[...], rhs_ref[...], preferred_element_type=jnp.float32)
        group = group_ids_ref[visit]
        rows = m_tile_ids_ref[visit] * tm + jax.lax.broadcasted_iota(jnp.int32, out_ref.shape, 0)
        mine = (rows >= group_offsets_ref[group]) & (rows < group_offsets_ref[group + 1])
        out_ref[...] = jnp.where(mine, product, 0).astype(out_ref.dtype)
