"""quant.int8_dot: the products summed in float32 (exact on these sizes, but only up to
2^24 in general), converted to int32 at the end."""
PUZZLE = "quant.int8_dot"
EXPECT = "while a float32 sum is exact only up to 2^24"


def int8_matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def int8_matmul_int32(a_q, b_q, *, bm=128, bk=128, bn=128):
    (M, K), (_, N) = a_q.shape, b_q.shape
    return pl.pallas_call(
        int8_matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), jnp.int32),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), K // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a_q, b_q)
