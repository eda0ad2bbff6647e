"""pipelining.copy_loop: a shortcut: every chunk copied at once into a whole-array
pl.run_scoped buffer (scratch_shapes keeps one chunk), all waited, then summed."""
PUZZLE = "pipelining.copy_loop"
EXPECT = "reused for every chunk"


def column_sum_kernel(x_hbm, o_ref, chunk_vmem, sem, *, chunk):
    num_chunks = x_hbm.shape[0] // chunk

    def everything(x_vmem, sems):
        for i in range(num_chunks):
            pltpu.make_async_copy(x_hbm.at[pl.ds(i * chunk, chunk)],
                                  x_vmem.at[pl.ds(i * chunk, chunk)], sems.at[i]).start()
        for i in range(num_chunks):
            pltpu.make_async_copy(x_hbm.at[pl.ds(i * chunk, chunk)],
                                  x_vmem.at[pl.ds(i * chunk, chunk)], sems.at[i]).wait()
        total = jnp.sum(x_vmem[...].astype(jnp.float32), axis=0, keepdims=True)
        o_ref[...] = total.astype(o_ref.dtype)

    pl.run_scoped(everything, pltpu.VMEM(x_hbm.shape, x_hbm.dtype),
                  pltpu.SemaphoreType.DMA((num_chunks,)))
