"""scratch accumulator allocated in a.dtype (bf16) instead of float32; should point at the accumulator dtype."""
PUZZLE = "matmul.k_accumulate"
EXPECT = 'declare the scratch pltpu.VMEM((bm, bn), jnp.float32)'


def matmul_tiled(a, b, *, bm=128, bk=128, bn=128):
    (M, K), (K_b, N) = a.shape, b.shape
    return pl.pallas_call(
        matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), a.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), K // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
            pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), a.dtype)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a, b)
