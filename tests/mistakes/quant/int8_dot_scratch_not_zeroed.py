"""quant.int8_dot: the int32 scratch never zeroed: interpret mode fills it with
2147483647 (no NaN in integers), and every sum starts there."""
PUZZLE = "quant.int8_dot"
EXPECT = 'so most sums started there and wrapped around'


def int8_matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    # int8 x int8 on the MXU, every product and sum in int32: exact.
    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.int32)

    @pl.when(k == pl.num_programs(2) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...]
