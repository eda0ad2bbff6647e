"""quant.weight_only: a kernel of its own dequantises w_q into a float32 [K, N] array in
HBM, and the matmul kernel reads that: four times the weights' bytes cross HBM."""
PUZZLE = "quant.weight_only"
EXPECT = "not by a kernel of their own that writes a float copy to HBM"


def int8_weight_matmul(x, w_q, w_scale, *, bm=128, bk=128, bn=128):
    (M, K), N = x.shape, w_q.shape[1]
    bm, bk, bn = min(bm, M), min(bk, K), min(bn, N)
    pad = -K % bk
    x = jnp.pad(x, ((0, 0), (0, pad)))
    w_q = jnp.pad(w_q, ((0, pad), (0, 0)))

    def dequantize(w_ref, s_ref, o_ref):
        o_ref[...] = w_ref[...].astype(jnp.float32) * s_ref[...]

    w = pl.pallas_call(
        dequantize, out_shape=jax.ShapeDtypeStruct(w_q.shape, jnp.float32),
        grid=(pl.cdiv(N, bn),),
        in_specs=[pl.BlockSpec((K + pad, bn), lambda j: (0, j)),
                  pl.BlockSpec((1, bn), lambda j: (0, j))],
        out_specs=pl.BlockSpec((K + pad, bn), lambda j: (0, j)))(w_q, w_scale)

    def kernel(x_ref, w_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def start_tile():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        x_blk = x_ref[...]
        acc_ref[...] += jnp.dot(x_blk, w_ref[...].astype(x_blk.dtype),
                                preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def finish_tile():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), x.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), (K + pad) // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, w)
