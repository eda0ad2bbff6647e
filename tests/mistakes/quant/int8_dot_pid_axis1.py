"""Slip: k = pl.program_id(1) (the N axis) instead of program_id(2); diagnosis should point at the program_id axis of the k steps."""
PUZZLE = "quant.int8_dot"
EXPECT = 'every value is 2147483647'


def int8_matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(1)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.int32)

    @pl.when(k == pl.num_programs(2) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...]
