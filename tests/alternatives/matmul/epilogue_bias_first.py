"""matmul.epilogue with the accumulator started at the bias (broadcast over the rows)
instead of zeros, so that the epilogue is the GELU alone; the bias's block is a 1-D
(bn,) slice of the [N] vector."""
PUZZLE = "matmul.epilogue"


def matmul_bias_gelu_kernel(a_ref, b_ref, bias_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_from_bias():
        acc_ref[...] = jnp.broadcast_to(bias_ref[...].astype(jnp.float32)[None, :],
                                        acc_ref.shape)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def gelu():
        o_ref[...] = jax.nn.gelu(acc_ref[...]).astype(o_ref.dtype)


def matmul_bias_gelu(a, b, bias, *, bm=128, bk=128, bn=128):
    (M, K), (_, N) = a.shape, b.shape
    if K % bk:
        raise ValueError(f"matmul_bias_gelu: bk={bk} must divide K={K}")
    return pl.pallas_call(
        matmul_bias_gelu_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), a.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), K // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
                  pl.BlockSpec((bn,), lambda i, j, k: (j,))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a, b, bias)
