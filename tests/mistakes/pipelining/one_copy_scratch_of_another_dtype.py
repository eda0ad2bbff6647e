"""pipelining.one_copy: the VMEM scratch is bf16 for an f32 x (cast after the copy, as one
would cast a value): a DMA copies bytes, it does not convert."""
PUZZLE = "pipelining.one_copy"
EXPECT = "a DMA moves bytes and cannot convert"


def add_one_kernel(x_hbm, o_ref, x_vmem, sem):
    copy = pltpu.make_async_copy(x_hbm, x_vmem, sem)
    copy.start()
    copy.wait()
    o_ref[...] = x_vmem[...].astype(o_ref.dtype) + 1


def add_one(x):
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM(x.shape, jnp.bfloat16), pltpu.SemaphoreType.DMA(())],
    )(x)
