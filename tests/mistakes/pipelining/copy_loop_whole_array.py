"""pipelining.copy_loop: one copy of the whole of x into a VMEM buffer as big as x."""
PUZZLE = "pipelining.copy_loop"
EXPECT = "so that VMEM holds one chunk at a time"


def column_sum(x, *, chunk):
    def kernel(x_hbm, o_ref, x_vmem, sem):
        copy = pltpu.make_async_copy(x_hbm, x_vmem, sem)
        copy.start()
        copy.wait()
        o_ref[...] = jnp.sum(x_vmem[...], axis=0, keepdims=True)

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((1, x.shape[1]), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA(())])(x)
