"""matmul.mixed_precision: asks the dot for the inputs' dtype. The values happen to be
exact here (each k step's sum fits in bf16), but no TPU accumulates a matmul in bf16:
the lowering says so, and the diagnosis must say that, not a tiling rule."""
PUZZLE = "matmul.mixed_precision"
EXPECT = "its MXU adds up a matmul in 32 bits"


def matmul_kernel(a_ref, b_ref, o_ref, acc_ref, *, k_axis=2):
    k = pl.program_id(k_axis)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=a_ref.dtype)

    @pl.when(k == pl.num_programs(k_axis) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)
