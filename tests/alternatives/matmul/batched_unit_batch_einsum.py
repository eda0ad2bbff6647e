"""matmul.batched with the batch dim kept as a block dim of 1 (not squeezed with None) and
the 3-D blocks multiplied by a batched einsum: the same grid, blocks and bytes."""
PUZZLE = "matmul.batched"


def batched_kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(3)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.einsum("bmk,bkn->bmn", a_ref[...], b_ref[...],
                               preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(3) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def batched_matmul(a, b, *, bm=128, bk=128, bn=128):
    (B, M, K), (B_b, K_b, N) = a.shape, b.shape
    if B != B_b or K != K_b:
        raise ValueError(f"batched_matmul: expected a [B, M, K] and b [B, K, N], "
                         f"got {a.shape} and {b.shape}")
    if K % bk:
        raise ValueError(f"batched_matmul: bk={bk} must divide K={K}")
    return pl.pallas_call(
        batched_kernel,
        out_shape=jax.ShapeDtypeStruct((B, M, N), a.dtype),
        grid=(B, pl.cdiv(M, bm), pl.cdiv(N, bn), K // bk),
        in_specs=[pl.BlockSpec((1, bm, bk), lambda batch, i, j, k: (batch, i, k)),
                  pl.BlockSpec((1, bk, bn), lambda batch, i, j, k: (batch, k, j))],
        out_specs=pl.BlockSpec((1, bm, bn), lambda batch, i, j, k: (batch, i, j)),
        scratch_shapes=[pltpu.VMEM((1, bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(a, b)
