"""matmul.epilogue: the bias block follows the row block i instead of the column block j."""
PUZZLE = "matmul.epilogue"
EXPECT = "its index map is (0, j)"


def matmul_bias_gelu(a, b, bias, *, bm=128, bk=128, bn=128):
    (M, K), (_, N) = a.shape, b.shape
    return pl.pallas_call(
        matmul_bias_gelu_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), a.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), K // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
                  pl.BlockSpec((1, bn), lambda i, j, k: (0, i))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
    )(a, b, bias.reshape(1, N))
