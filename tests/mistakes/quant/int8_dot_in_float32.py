"""quant.int8_dot: a shortcut. The int8 blocks are cast to float32 and multiplied there
(exact for these small integers), the sum kept in int32: the values are right, the MXU's
int8 product is not used."""
PUZZLE = "quant.int8_dot"
EXPECT = "multiplies the blocks as float32 x float32"


def int8_matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def start():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    product = jnp.dot(a_ref[...].astype(jnp.float32), b_ref[...].astype(jnp.float32),
                      preferred_element_type=jnp.float32)
    acc_ref[...] += product.astype(jnp.int32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def finish():
        o_ref[...] = acc_ref[...]
