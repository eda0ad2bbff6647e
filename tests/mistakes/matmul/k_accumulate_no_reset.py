"""matmul.k_accumulate: the scratch is never zeroed, so the first add reads garbage."""
PUZZLE = "matmul.k_accumulate"
EXPECT = "zeroed at the first k step of every output tile"


def matmul_kernel(a_ref, b_ref, o_ref, acc_ref, *, k_axis=2):
    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(k_axis) == pl.num_programs(k_axis) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)
