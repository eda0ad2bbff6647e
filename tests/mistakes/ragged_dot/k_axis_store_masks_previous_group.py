"""ragged_dot.k_axis: the store's mask takes the previous visit's group."""
PUZZLE = "ragged_dot.k_axis"
EXPECT = "a visit stores the rows of its own group g = group_ids_ref[visit]"
AVOID = "compare the program ids"


def gmm_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref, lhs_ref,
               rhs_ref, out_ref, acc_ref, *, tm, tk, k_size):
    visit, k = pl.program_id(1), pl.program_id(2)

    @pl.when(visit < num_tiles_ref[0])
    def real_visit():
        @pl.when(k == 0)
        def start_tile():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        lhs, rhs = lhs_ref[...], rhs_ref[...]
        if k_size % tk:   # the last K block hangs off the end: zero what lies past K
            valid = k_size - k * tk
            lhs = jnp.where(jax.lax.broadcasted_iota(jnp.int32, lhs.shape, 1) < valid, lhs, 0)
            rhs = jnp.where(jax.lax.broadcasted_iota(jnp.int32, rhs.shape, 0) < valid, rhs, 0)
        acc_ref[...] += jnp.dot(lhs, rhs, preferred_element_type=jnp.float32)

        @pl.when(k == pl.num_programs(2) - 1)
        def store_tile():
            group = group_ids_ref[jnp.maximum(visit - 1, 0)]
            rows = m_tile_ids_ref[visit] * tm + jax.lax.broadcasted_iota(jnp.int32,
                                                                         out_ref.shape, 0)
            mine = (rows >= group_offsets_ref[group]) & (rows < group_offsets_ref[group + 1])
            out_ref[...] = jnp.where(mine, acc_ref[...].astype(out_ref.dtype), out_ref[...])


