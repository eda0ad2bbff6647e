"""matmul.one_block (shortcut): the right kernel runs, its result is dropped."""
PUZZLE = "matmul.one_block"
EXPECT = "is never used"


def matmul_one_block(a, b):
    (M, _), (_, N) = a.shape, b.shape
    pl.pallas_call(one_block_kernel, out_shape=jax.ShapeDtypeStruct((M, N), a.dtype))(a, b)
    return jnp.dot(a, b, preferred_element_type=jnp.float32).astype(a.dtype)
