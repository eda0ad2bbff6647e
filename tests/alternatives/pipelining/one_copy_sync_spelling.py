"""pipelining.one_copy with the copy built and started by a small helper and waited
where it is used, the semaphore an unshaped DMA semaphore, and 1 + x for x + 1."""
PUZZLE = "pipelining.one_copy"


def _copy_in(source, target, sem):
    copy = pltpu.make_async_copy(source, target, sem)
    copy.start()
    return copy


def add_one_kernel(x_hbm, o_ref, x_vmem, sem):
    _copy_in(x_hbm, x_vmem, sem).wait()
    o_ref[...] = 1 + x_vmem[...]


def add_one(x):
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA],
    )(x)
