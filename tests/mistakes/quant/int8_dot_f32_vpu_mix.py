"""int8 x int8: the products are done on the VPU in float32 (blocks cast up, broadcast
multiply, sum over bk; exact here, 127*127*128 < 2^24) and cast to int32; the int8 MXU
dot runs as a decoy and enters the int32 sum as (3 * vpu + mxu) >> 2 (exact, both agree).
Dodges 'int8 x int8 on the MXU' (int8 products done as float32)."""
PUZZLE = "quant.int8_dot"
EXPECT = "in a pattern that is a matrix product"


def int8_matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    a = a_ref[...].astype(jnp.float32)
    b = b_ref[...].astype(jnp.float32)
    vpu = jnp.sum(a[:, :, None] * b[None, :, :], axis=1).astype(jnp.int32)
    mxu = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.int32)
    acc_ref[...] += jax.lax.shift_right_arithmetic(3 * vpu + mxu, 2)

    @pl.when(k == pl.num_programs(2) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...]
