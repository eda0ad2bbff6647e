"""basics.row_sum with the sums kept in a float32 VMEM scratch and written to the output
once, at the last column step (the accumulator pattern of matmul), with the reduction
axis's length read from pl.num_programs and the phases as lax.cond-free pl.when."""
PUZZLE = "basics.row_sum"


def row_sum_kernel(x_ref, o_ref, acc_ref):
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    acc_ref[...] += x_ref[...].astype(jnp.float32).sum(axis=-1)[:, None]

    @pl.when(j == pl.num_programs(1) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def row_sum(x, *, bm=8, bn=128):
    M, N = x.shape
    assert N % bn == 0, f"row_sum: bn={bn} must divide N={N}"
    return pl.pallas_call(
        row_sum_kernel,
        out_shape=jax.ShapeDtypeStruct((M, 1), x.dtype),
        grid=(pl.cdiv(M, bm), N // bn),
        in_specs=[pl.BlockSpec((bm, bn), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((bm, 1), lambda i, j: (i, 0)),
        scratch_shapes=[pltpu.VMEM((bm, 1), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(x).reshape(M)
