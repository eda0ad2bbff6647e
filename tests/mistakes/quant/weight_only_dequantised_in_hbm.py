"""quant.weight_only: the weights dequantised in JAX before the kernel (a float copy of
w_q written to HBM and read back), then a float matmul kernel."""
PUZZLE = "quant.weight_only"
EXPECT = "the weights were dequantised outside the kernel"


def int8_weight_matmul(x, w_q, w_scale, *, bm=128, bk=128, bn=128):
    (M, K), N = x.shape, w_q.shape[1]
    bm, bk, bn = min(bm, M), min(bk, K), min(bn, N)
    pad = -K % bk
    x = jnp.pad(x, ((0, 0), (0, pad)))
    w = jnp.pad(w_q, ((0, pad), (0, 0))).astype(x.dtype) * w_scale.astype(x.dtype)

    def kernel(x_ref, w_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def start_tile():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

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
