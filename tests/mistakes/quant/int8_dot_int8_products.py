"""quant.int8_dot: an int32 scratch, but jnp.dot without preferred_element_type: each k
step's int8 product wraps around before it is added."""
PUZZLE = "quant.int8_dot"
EXPECT = "Pass preferred_element_type=jnp.int32 to jnp.dot"


def int8_matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...]).astype(jnp.int32)

    @pl.when(k == pl.num_programs(2) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...]
