"""matmul.one_block with the @ operator and the output shape read from the refs."""
PUZZLE = "matmul.one_block"


def one_block_kernel(a_ref, b_ref, o_ref):
    o_ref[...] = (a_ref[...] @ b_ref[...]).astype(o_ref.dtype)


def matmul_one_block(a, b):
    M, N = a.shape[0], b.shape[1]
    return pl.pallas_call(one_block_kernel,
                          out_shape=jax.ShapeDtypeStruct((M, N), a.dtype))(a, b)
