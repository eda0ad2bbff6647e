"""ragged_dot.k_axis: the last K block used as it comes: what lies past K (NaN in interpret
mode) reaches the dot."""
PUZZLE = "ragged_dot.k_axis"
EXPECT = "Zero both lhs's columns and rhs's rows past K"


def gmm_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref, lhs_ref,
               rhs_ref, out_ref, acc_ref, *, tm, tk, k_size):
    visit, k = pl.program_id(1), pl.program_id(2)

    @pl.when(visit < num_tiles_ref[0])
    def real_visit():
        @pl.when(k == 0)
        def start():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(lhs_ref[...], rhs_ref[...], preferred_element_type=jnp.float32)

        @pl.when(k == pl.num_programs(2) - 1)
        def store():
            group = group_ids_ref[visit]
            rows = m_tile_ids_ref[visit] * tm + jax.lax.broadcasted_iota(jnp.int32,
                                                                         out_ref.shape, 0)
            mine = (rows >= group_offsets_ref[group]) & (rows < group_offsets_ref[group + 1])
            out_ref[...] = jnp.where(mine, acc_ref[...].astype(out_ref.dtype), out_ref[...])
