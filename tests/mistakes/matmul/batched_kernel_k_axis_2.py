"""matmul.batched: reuses matmul_kernel without telling it that K is grid axis 3."""
PUZZLE = "matmul.batched"
EXPECT = "k_axis=3"


def batched_matmul(a, b, *, bm=128, bk=128, bn=128):
    (B, M, K), (_, _, N) = a.shape, b.shape
    return pl.pallas_call(
        matmul_kernel,   # counts its k steps on grid axis 2, which is j here
        out_shape=jax.ShapeDtypeStruct((B, M, N), a.dtype),
        grid=(B, pl.cdiv(M, bm), pl.cdiv(N, bn), K // bk),
        in_specs=[pl.BlockSpec((None, bm, bk), lambda batch, i, j, k: (batch, i, k)),
                  pl.BlockSpec((None, bk, bn), lambda batch, i, j, k: (batch, k, j))],
        out_specs=pl.BlockSpec((None, bm, bn), lambda batch, i, j, k: (batch, i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
    )(a, b)
