"""matmul.mixed_precision: the K sum runs in o_ref, which is bf16 for bf16 inputs
(o_ref zeroed at k == 0, so an f32 output would still be right)."""
PUZZLE = "matmul.mixed_precision"
EXPECT = "the running sum was kept in bf16"


def matmul_kernel(a_ref, b_ref, o_ref, acc_ref, *, k_axis=2):
    @pl.when(pl.program_id(k_axis) == 0)
    def start_tile():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += jnp.dot(a_ref[...], b_ref[...]).astype(o_ref.dtype)
