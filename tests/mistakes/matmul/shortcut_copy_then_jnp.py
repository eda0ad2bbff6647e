"""matmul.one_block (shortcut): the kernel copies a; jnp.dot does the matmul outside."""
PUZZLE = "matmul.one_block"
EXPECT = "The matmul (jnp.dot) happens outside your kernel"


def matmul_one_block(a, b):
    def copy_kernel(a_ref, o_ref):
        o_ref[...] = a_ref[...]

    copied = pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype))(a)
    return jnp.dot(copied, b)
