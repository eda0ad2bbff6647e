"""pipelining.copy_loop (shortcut): the kernel copies x chunk by chunk; jnp.sum adds
up the rows outside it."""
PUZZLE = "pipelining.copy_loop"
EXPECT = "sum each chunk inside the kernel"


def column_sum(x, *, chunk):
    def copy_kernel(x_hbm, o_ref, sem):
        for i in range(x.shape[0] // chunk):
            rows = pl.ds(i * chunk, chunk)
            copy = pltpu.make_async_copy(x_hbm.at[rows], o_ref.at[rows], sem)
            copy.start()
            copy.wait()

    copied = pl.pallas_call(
        copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.SemaphoreType.DMA(())])(x)
    return jnp.sum(copied, axis=0, keepdims=True)
