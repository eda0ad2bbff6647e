"""matmul.k_accumulate: the K axis comes first in the grid, so an output tile is left
and revisited while its sum is still running."""
PUZZLE = "matmul.k_accumulate"
EXPECT = "put K last in the grid"


def matmul_tiled(a, b, *, bm=128, bk=128, bn=128):
    (M, K), (_, N) = a.shape, b.shape
    return pl.pallas_call(
        functools.partial(matmul_kernel, k_axis=0),
        out_shape=jax.ShapeDtypeStruct((M, N), a.dtype),
        grid=(K // bk, pl.cdiv(M, bm), pl.cdiv(N, bn)),
        in_specs=[pl.BlockSpec((bm, bk), lambda k, i, j: (i, k)),
                  pl.BlockSpec((bk, bn), lambda k, i, j: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda k, i, j: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
    )(a, b)
