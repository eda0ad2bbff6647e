"""matmul.batched with blocks of (1, bm, bk) instead of a squeezed batch dim (the
kernel indexes the 1 away), a kernel of its own that reads the K axis's position from
the grid's length, and the batch axis last among the parallel ones."""
PUZZLE = "matmul.batched"


def batched_kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(3)

    @pl.when(k == 0)
    def init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[0], b_ref[0], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(3) - 1)
    def done():
        o_ref[0] = acc_ref[...].astype(o_ref.dtype)


def batched_matmul(a, b, *, bm=128, bk=128, bn=128):
    (B, M, K), (_, _, N) = a.shape, b.shape
    if K % bk:
        raise ValueError(f"batched_matmul: bk={bk} must divide K={K}")
    return pl.pallas_call(
        batched_kernel,
        out_shape=jax.ShapeDtypeStruct((B, M, N), a.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), B, K // bk),
        in_specs=[pl.BlockSpec((1, bm, bk), lambda i, j, z, k: (z, i, k)),
                  pl.BlockSpec((1, bk, bn), lambda i, j, z, k: (z, k, j))],
        out_specs=pl.BlockSpec((1, bm, bn), lambda i, j, z, k: (z, i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(a, b)
