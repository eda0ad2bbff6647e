"""quant.weight_only: the running sum in a scratch of x's dtype, bf16 for bf16 inputs, each\nstep's float32 product cast to it before it is added."""
PUZZLE = "quant.weight_only"
EXPECT = "the running sum is carried in bf16 from step to step"


def weight_only_kernel(x_ref, w_ref, w_scale_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    x = x_ref[...]
    product = jnp.dot(x, w_ref[...].astype(x.dtype), preferred_element_type=jnp.float32)
    acc_ref[...] += product.astype(acc_ref.dtype)

    @pl.when(k == pl.num_programs(2) - 1)
    def dequantize():
        o_ref[...] = (acc_ref[...] * w_scale_ref[...]).astype(o_ref.dtype)


def int8_weight_matmul(x, w_q, w_scale, *, bm=128, bk=128, bn=128):
    (M, K), N = x.shape, w_q.shape[1]
    bm, bk, bn = min(bm, M), min(bk, K), min(bn, N)
    pad = -K % bk
    x = jnp.pad(x, ((0, 0), (0, pad)))
    w_q = jnp.pad(w_q, ((0, pad), (0, 0)))
    return pl.pallas_call(
        weight_only_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), x.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), (K + pad) // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
                  pl.BlockSpec((1, bn), lambda i, j, k: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), x.dtype)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, w_q, w_scale)
