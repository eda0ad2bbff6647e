"""matmul.k_accumulate with the grid walking column blocks first, (N/bn, M/bm, K/bk),
the dot spelt as lax.dot_general with its contracting dims, and the accumulator's
phases as named functions called under pl.when."""
PUZZLE = "matmul.k_accumulate"

CONTRACT = (((1,), (0,)), ((), ()))


def matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    k, last = pl.program_id(2), pl.num_programs(2) - 1

    def zero():
        acc_ref[...] = jnp.zeros(acc_ref.shape, acc_ref.dtype)

    def store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    pl.when(k == 0)(zero)
    acc_ref[...] += jax.lax.dot_general(a_ref[...], b_ref[...], CONTRACT,
                                        preferred_element_type=jnp.float32)
    pl.when(k == last)(store)


def matmul_tiled(a, b, *, bm=128, bk=128, bn=128):
    (M, K), (_, N) = a.shape, b.shape
    if K % bk:
        raise ValueError(f"matmul_tiled: bk={bk} must divide K={K}")
    return pl.pallas_call(
        matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), a.dtype),
        grid=(pl.cdiv(N, bn), pl.cdiv(M, bm), K // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda j, i, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda j, i, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda j, i, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a, b)
