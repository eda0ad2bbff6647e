"""matmul.k_accumulate: zeroes the scratch only at the very first grid step, so every
later tile starts from the previous tile's sum."""
PUZZLE = "matmul.k_accumulate"
EXPECT = "not only at the very first grid step"


def matmul_kernel(a_ref, b_ref, o_ref, acc_ref, *, k_axis=2):
    first_step = (pl.program_id(0) == 0) & (pl.program_id(1) == 0) & (pl.program_id(2) == 0)

    @pl.when(first_step)
    def start():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(k_axis) == pl.num_programs(k_axis) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)
