"""quant.int8_dot with the int8 x int8 product as lax.dot_general into int32, the grid
walking column blocks first, and the phases as named functions under pl.when."""
PUZZLE = "quant.int8_dot"


def int8_matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    def clear():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.int32)

    def emit():
        o_ref[...] = acc_ref[...]

    pl.when(k == 0)(clear)
    acc_ref[...] += jax.lax.dot_general(a_ref[...], b_ref[...], (((1,), (0,)), ((), ())),
                                        preferred_element_type=jnp.int32)
    pl.when(k == pl.num_programs(2) - 1)(emit)


def int8_matmul_int32(a_q, b_q, *, bm=128, bk=128, bn=128):
    (M, K), (_, N) = a_q.shape, b_q.shape
    if K % bk:
        raise ValueError(f"int8_matmul_int32: bk={bk} must divide K={K}")
    return pl.pallas_call(
        int8_matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), jnp.int32),
        grid=(pl.cdiv(N, bn), pl.cdiv(M, bm), K // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda j, i, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda j, i, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda j, i, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.int32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a_q, b_q)
