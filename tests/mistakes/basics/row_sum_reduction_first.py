"""basics.row_sum: the reduction axis first in the grid, marked "arbitrary" before a
"parallel" axis."""
PUZZLE = "basics.row_sum"
EXPECT = "put the reduction axis last in the grid"


def row_sum_kernel(x_ref, o_ref):
    @pl.when(pl.program_id(0) == 0)
    def start_row():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += jnp.sum(x_ref[...], axis=1, keepdims=True)


def row_sum(x, *, bm=8, bn=128):
    M, N = x.shape
    out = pl.pallas_call(
        row_sum_kernel,
        out_shape=jax.ShapeDtypeStruct((M, 1), x.dtype),
        grid=(pl.cdiv(N, bn), pl.cdiv(M, bm)),
        in_specs=[pl.BlockSpec((bm, bn), lambda j, i: (i, j))],
        out_specs=pl.BlockSpec((bm, 1), lambda j, i: (i, 0)),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("arbitrary", "parallel")),
    )(x)
    return out[:, 0]
