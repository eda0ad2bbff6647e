"""ragged_dot.tgmm: previous = group_ids_ref[visit - 1] with no clamp: at visit 0 it reads
index -1."""
PUZZLE = "ragged_dot.tgmm"
EXPECT = "index -1 along dim 0"


def tgmm_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref, lhs_ref,
                grad_ref, out_ref, acc_ref, *, tm):
    visit = pl.program_id(2)
    num_tiles = num_tiles_ref[0]
    group = group_ids_ref[visit]
    previous = group_ids_ref[visit - 1]
    following = group_ids_ref[jnp.minimum(visit + 1, pl.num_programs(2) - 1)]

    @pl.when((visit == 0) | (previous != group))
    def start_group():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    rows_start, rows_end = group_offsets_ref[group], group_offsets_ref[group + 1]

    @pl.when((visit < num_tiles) & (rows_start < rows_end))
    def accumulate():            # an empty group's visit adds nothing
        first_row = m_tile_ids_ref[visit] * tm
        lhs_rows = first_row + jax.lax.broadcasted_iota(jnp.int32, lhs_ref.shape, 1)
        grad_rows = first_row + jax.lax.broadcasted_iota(jnp.int32, grad_ref.shape, 0)
        # Only this group's rows add: the other group's rows in a shared tile, and the
        # NaN past M, are zeroed on both sides (NaN * 0 is NaN).
        lhs = jnp.where((lhs_rows >= rows_start) & (lhs_rows < rows_end), lhs_ref[...], 0)
        grad = jnp.where((grad_rows >= rows_start) & (grad_rows < rows_end), grad_ref[...], 0)
        acc_ref[...] += jnp.dot(lhs, grad, preferred_element_type=jnp.float32)

    @pl.when((visit == num_tiles - 1) | (following != group))
    def store_group():           # an empty group stores its zeros
        out_ref[...] = acc_ref[...].astype(out_ref.dtype)
