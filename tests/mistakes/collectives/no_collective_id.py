"""collectives.ring_shift: the barrier is right, but the pallas_call gives no collective id,
so there is no barrier semaphore to get (the interpreter fails deep inside itself; this
was once reported as a kit problem)."""
PUZZLE = "collectives.ring_shift"
EXPECT = "CompilerParams(collective_id=0)"


def ring_shift(x, *, axis_name):
    return pl.pallas_call(
        functools.partial(ring_shift_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
    )(x)
