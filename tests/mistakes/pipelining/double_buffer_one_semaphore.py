"""column_sum_double_buffered: a single DMA semaphore (DMA(())) where the kernel indexes sems.at[slot]."""
PUZZLE = "pipelining.double_buffer"
EXPECT = "pltpu.SemaphoreType.DMA((2,))"


def column_sum_double_buffered(x, *, chunk):
    _check_chunk("column_sum_double_buffered", x, chunk)
    S, D = x.shape
    return pl.pallas_call(
        functools.partial(double_buffered_kernel, chunk=chunk),
        out_shape=jax.ShapeDtypeStruct((1, D), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((2, chunk, D), x.dtype),   # two slots
                        pltpu.SemaphoreType.DMA(())],       # one semaphore per slot
    )(x)
