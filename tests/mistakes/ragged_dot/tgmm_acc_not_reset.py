"""ragged_dot.tgmm: the accumulator zeroed only at the first visit of the grid: each
expert's gradient includes every group before it."""
PUZZLE = "ragged_dot.tgmm"
EXPECT = "zero the accumulator at the first visit of every group"


def tgmm_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref, lhs_ref,
                grad_ref, out_ref, acc_ref, *, tm):
    visit = pl.program_id(2)
    num_tiles = num_tiles_ref[0]
    group = group_ids_ref[visit]
    following = group_ids_ref[jnp.minimum(visit + 1, pl.num_programs(2) - 1)]

    @pl.when(visit == 0)
    def start():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    rows_start, rows_end = group_offsets_ref[group], group_offsets_ref[group + 1]

    @pl.when((visit < num_tiles) & (rows_start < rows_end))
    def accumulate():
        first_row = m_tile_ids_ref[visit] * tm
        lhs_rows = first_row + jax.lax.broadcasted_iota(jnp.int32, lhs_ref.shape, 1)
        grad_rows = first_row + jax.lax.broadcasted_iota(jnp.int32, grad_ref.shape, 0)
        lhs = jnp.where((lhs_rows >= rows_start) & (lhs_rows < rows_end), lhs_ref[...], 0)
        grad = jnp.where((grad_rows >= rows_start) & (grad_rows < rows_end), grad_ref[...], 0)
        acc_ref[...] += jnp.dot(lhs, grad, preferred_element_type=jnp.float32)

    @pl.when((visit == num_tiles - 1) | (following != group))
    def store():
        out_ref[...] = acc_ref[...].astype(out_ref.dtype)
