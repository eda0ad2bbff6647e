"""matmul.k_accumulate: zeroes the scratch but sums K into o_ref, which nothing zeroes."""
PUZZLE = "matmul.k_accumulate"
EXPECT = "not into o_ref, which nothing zeroes"


def matmul_kernel(a_ref, b_ref, o_ref, acc_ref, *, k_axis=2):
    @pl.when(pl.program_id(k_axis) == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    o_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
