"""matmul.k_accumulate: the scratch is zeroed at k == 1, after step 0's product was added."""
PUZZLE = "matmul.k_accumulate"
EXPECT = "the sum of every K block but the first"

def matmul_kernel(a_ref, b_ref, o_ref, acc_ref, *, k_axis=2):
    k = pl.program_id(k_axis)
    @pl.when(k == 1)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)
    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
    @pl.when(k == pl.num_programs(k_axis) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)

