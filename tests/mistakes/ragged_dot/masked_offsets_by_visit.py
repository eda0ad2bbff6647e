"""ragged_dot.masked: the group's row range read at group_offsets_ref[visit] / [visit + 1]
instead of [group] / [group + 1]."""
PUZZLE = "ragged_dot.masked"
EXPECT = "read at the visit's group g = group_ids_ref[visit]"


def gmm_masked_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref,
                      lhs_ref, rhs_ref, out_ref, *, tm):
    visit = pl.program_id(1)

    @pl.when(visit < num_tiles_ref[0])
    def compute_tile():
        product = jnp.dot(lhs_ref[...], rhs_ref[...], preferred_element_type=jnp.float32)
        # The rows of this tile that belong to this visit's group.
        group = group_ids_ref[visit]
        rows = m_tile_ids_ref[visit] * tm + jax.lax.broadcasted_iota(jnp.int32, out_ref.shape, 0)
        mine = (rows >= group_offsets_ref[visit]) & (rows < group_offsets_ref[visit + 1])
        # The other rows keep what an earlier visit of this tile wrote there: the output
        # block stays in VMEM while consecutive visits name the same tile.
        out_ref[...] = jnp.where(mine, product.astype(out_ref.dtype), out_ref[...])
