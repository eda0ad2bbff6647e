"""norms.long_rows: the output's index map follows j in both passes, so every output
block is copied back to HBM (garbage) during the first pass and again in the second."""
PUZZLE = "norms.long_rows"
EXPECT = "Keep the output on column block 0 while phase == 0"


def softmax_long(x, *, block_rows=8, block_cols=128):
    R, C = x.shape
    blocks = pl.BlockSpec((block_rows, block_cols), lambda i, phase, j: (i, j))
    return pl.pallas_call(
        functools.partial(softmax_long_kernel, C=C),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(R, block_rows), 2, pl.cdiv(C, block_cols)),
        in_specs=[blocks],
        out_specs=blocks,
        scratch_shapes=[pltpu.VMEM((block_rows, 1), jnp.float32),
                        pltpu.VMEM((block_rows, 1), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary")),
    )(x)
