"""A shortcut: the products on the vector unit in int32; the
int8 x int8 MXU dot joins through jnp.maximum(vpu, mxu - 2^30): the MXU's value minus
2^30 is always below the VPU's (|values| < 2^30), so the max always picks the VPU's."""
PUZZLE = "quant.int8_dot"
EXPECT = 'do not move the output'


def vpu_int_dot(a, b):
    return jnp.sum(a.astype(jnp.int32)[:, :, None] * b.astype(jnp.int32)[None, :, :], axis=1)


def int8_matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    mxu = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.int32)
    acc_ref[...] += jnp.maximum(vpu_int_dot(a_ref[...], b_ref[...]), mxu - (1 << 30))

    @pl.when(k == pl.num_programs(2) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...]
