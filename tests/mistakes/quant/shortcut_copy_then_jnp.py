"""quant.int8_dot (shortcut): a kernel copies a_q; jnp.dot does the matmul outside."""
PUZZLE = "quant.int8_dot"
EXPECT = "happens outside your kernel"


def int8_matmul_int32(a_q, b_q, *, bm=128, bk=128, bn=128):
    def copy_kernel(a_ref, o_ref):
        o_ref[...] = a_ref[...]

    copied = pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(a_q.shape, a_q.dtype))(a_q)
    return jnp.dot(copied, b_q, preferred_element_type=jnp.int32)
