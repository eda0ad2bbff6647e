"""matmul.batched: b's index map forgets the batch index and always reads b[0]."""
PUZZLE = "matmul.batched"
EXPECT = "(batch, k, j)"


def batched_matmul(a, b, *, bm=128, bk=128, bn=128):
    (B, M, K), (_, _, N) = a.shape, b.shape
    return pl.pallas_call(
        functools.partial(matmul_kernel, k_axis=3),
        out_shape=jax.ShapeDtypeStruct((B, M, N), a.dtype),
        grid=(B, pl.cdiv(M, bm), pl.cdiv(N, bn), K // bk),
        in_specs=[pl.BlockSpec((None, bm, bk), lambda batch, i, j, k: (batch, i, k)),
                  pl.BlockSpec((None, bk, bn), lambda batch, i, j, k: (0, k, j))],
        out_specs=pl.BlockSpec((None, bm, bn), lambda batch, i, j, k: (batch, i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
    )(a, b)
