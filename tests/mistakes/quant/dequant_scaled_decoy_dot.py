"""A shortcut in the dequantising kernel: the products on the vector
unit in int32; the MXU's int8 dot joins as (|dot| >> 30), always 0."""
PUZZLE = "quant.dequant"
EXPECT = 'its result moves no output'


def vpu_int_dot(a, b):
    return jnp.sum(a.astype(jnp.int32)[:, :, None] * b.astype(jnp.int32)[None, :, :], axis=1)


def int8_dequant_kernel(a_ref, a_scale_ref, b_ref, b_scale_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    mxu = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.int32)
    acc_ref[...] += vpu_int_dot(a_ref[...], b_ref[...]) + jnp.right_shift(jnp.abs(mxu), 30)

    @pl.when(k == pl.num_programs(2) - 1)
    def dequantize():
        scale = a_scale_ref[...] * b_scale_ref[...]
        o_ref[...] = (acc_ref[...].astype(jnp.float32) * scale).astype(o_ref.dtype)
