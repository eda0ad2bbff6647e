"""collectives.shift_add: the right values, but written with pl.pallas_call (BlockSpecs in
HBM, scratch_shapes) where the puzzle teaches pl.kernel over a TensorCoreMesh."""
PUZZLE = "collectives.shift_add"
EXPECT = "the API the current docs teach"


def shift_add(x, *, axis_name):
    return pl.pallas_call(
        functools.partial(shift_add_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.VMEM(x.shape, x.dtype),
                        pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x)
