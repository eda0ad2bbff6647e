"""quant.dequant: the int8 products summed in a float32 scratch and scaled once at the
end: right on these sizes, but a float32 sum is exact only up to 2^24."""
PUZZLE = "quant.dequant"
EXPECT = "int8 products summed in float32 are exact only up to 2^24"


def int8_dequant_kernel(a_ref, a_scale_ref, b_ref, b_scale_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def dequantize():
        o_ref[...] = acc_ref[...] * (a_scale_ref[...] * b_scale_ref[...])


def int8_matmul(a_q, a_scale, b_q, b_scale, *, bm=128, bk=128, bn=128):
    (M, K), N = a_q.shape, b_q.shape[1]
    bm, bk, bn = min(bm, M), min(bk, K), min(bn, N)
    pad = -K % bk
    a_q = jnp.pad(a_q, ((0, 0), (0, pad)))
    b_q = jnp.pad(b_q, ((0, pad), (0, 0)))
    return pl.pallas_call(
        int8_dequant_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), jnp.float32),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), (K + pad) // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bm, 1), lambda i, j, k: (i, 0)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
                  pl.BlockSpec((1, bn), lambda i, j, k: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a_q, a_scale, b_q, b_scale)
