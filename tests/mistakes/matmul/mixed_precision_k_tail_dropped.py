"""matmul.mixed_precision: no padding along K, and a grid of K // bk steps that stops
short of the end of K."""
PUZZLE = "matmul.mixed_precision"
EXPECT = "K // bk grid steps stop short of the end of K"


def matmul_tiled(a, b, *, bm=128, bk=128, bn=128):
    (M, K), (_, N) = a.shape, b.shape
    return pl.pallas_call(
        matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), a.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), K // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a, b)


def matmul(a, b, *, bm=128, bk=128, bn=128):
    (M, K), (_, N) = a.shape, b.shape
    return matmul_tiled(a, b, bm=min(bm, M), bk=min(bk, K), bn=min(bn, N))
