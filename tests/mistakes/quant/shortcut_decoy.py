"""quant.dequant (shortcut): the right kernel runs; the result comes from plain JAX."""
PUZZLE = "quant.dequant"
EXPECT = "is never used"


def int8_matmul(a_q, a_scale, b_q, b_scale, *, bm=128, bk=128, bn=128):
    int8_matmul_int32(a_q[:32, :128], b_q[:128, :128], bm=32, bk=128, bn=128)
    product = jnp.dot(a_q, b_q, preferred_element_type=jnp.int32)
    return product.astype(jnp.float32) * a_scale * b_scale
