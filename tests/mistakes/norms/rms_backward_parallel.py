"""norms.rms_backward: the row-block axis is marked "parallel" while dscale sums
across it: two TPU cores would each keep half of the sum."""
PUZZLE = "norms.rms_backward"
EXPECT = 'so it must be "arbitrary"'


def rms_norm_backward(x, scale, inv_rms, dy, *, block_rows=8):
    R, D = x.shape
    rows = pl.BlockSpec((block_rows, D), lambda i: (i, 0))
    whole = pl.BlockSpec((1, D), lambda i: (0, 0))
    dx, dscale = pl.pallas_call(
        functools.partial(rms_norm_backward_kernel, R=R),
        out_shape=[jax.ShapeDtypeStruct(x.shape, dy.dtype),
                   jax.ShapeDtypeStruct((1, D), scale.dtype)],
        grid=(pl.cdiv(R, block_rows),),
        in_specs=[rows, whole, pl.BlockSpec((block_rows, 1), lambda i: (i, 0)), rows],
        out_specs=[rows, whole],
        scratch_shapes=[pltpu.VMEM((1, D), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, scale.reshape(1, D), inv_rms, dy)
    return dx, dscale.reshape(D)
