"""ragged_dot.masked: the dot runs on every step, the padding steps past num_tiles too:
the values survive (a padding step repeats the last visit), the work does not. With as
many padding steps as empty groups, the flops alone are those of a kernel that visits
the empty groups: the bytes tell the two apart."""
PUZZLE = "ragged_dot.masked"
EXPECT = "your kernel computes on the padding steps too (past num_tiles): they repeat"


def gmm_masked_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref,
                      lhs_ref, rhs_ref, out_ref, *, tm):
    visit = pl.program_id(1)
    product = jnp.dot(lhs_ref[...], rhs_ref[...], preferred_element_type=jnp.float32)
    group = group_ids_ref[visit]
    rows = m_tile_ids_ref[visit] * tm + jax.lax.broadcasted_iota(jnp.int32, out_ref.shape, 0)
    mine = (rows >= group_offsets_ref[group]) & (rows < group_offsets_ref[group + 1])
    out_ref[...] = jnp.where(mine, product.astype(out_ref.dtype), out_ref[...])
