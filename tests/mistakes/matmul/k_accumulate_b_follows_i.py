"""matmul.k_accumulate: b's index map returns (k, i), not (k, j): right on the diagonal tiles, garbage where block i hangs past N."""
PUZZLE = "matmul.k_accumulate"
EXPECT = "does an index map fetch a block that hangs past the end of a"

def matmul_tiled(a, b, *, bm=128, bk=128, bn=128):
    (M, K), (_, N) = a.shape, b.shape
    return pl.pallas_call(matmul_kernel, out_shape=jax.ShapeDtypeStruct((M, N), a.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), K // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, i))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")))(a, b)

