"""matmul.batched: block shapes with 1 instead of None for the batch dim, so the
kernel gets 3-D blocks."""
PUZZLE = "matmul.batched"
EXPECT = "put None for the batch dim"


def batched_matmul(a, b, *, bm=128, bk=128, bn=128):
    (B, M, K), (_, _, N) = a.shape, b.shape
    return pl.pallas_call(
        functools.partial(matmul_kernel, k_axis=3),
        out_shape=jax.ShapeDtypeStruct((B, M, N), a.dtype),
        grid=(B, pl.cdiv(M, bm), pl.cdiv(N, bn), K // bk),
        in_specs=[pl.BlockSpec((1, bm, bk), lambda batch, i, j, k: (batch, i, k)),
                  pl.BlockSpec((1, bk, bn), lambda batch, i, j, k: (batch, k, j))],
        out_specs=pl.BlockSpec((1, bm, bn), lambda batch, i, j, k: (batch, i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
    )(a, b)
