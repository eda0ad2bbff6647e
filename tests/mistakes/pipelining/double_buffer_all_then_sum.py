"""pipelining.double_buffer: a shortcut: every chunk's copy started, then every one
waited, then the sums: the copies are in flight together, but no sum runs while one is."""
PUZZLE = "pipelining.double_buffer"
EXPECT = "every copy is started before the first sum"


def double_buffered_kernel(x_hbm, o_ref, chunks_vmem, sems, *, chunk):
    num_chunks = x_hbm.shape[0] // chunk

    def everything(x_vmem, all_sems):
        def copy(i):
            return pltpu.make_async_copy(x_hbm.at[pl.ds(i * chunk, chunk)], x_vmem.at[i],
                                         all_sems.at[i])
        for i in range(num_chunks):
            copy(i).start()
        for i in range(num_chunks):
            copy(i).wait()
        total = jnp.zeros(o_ref.shape, jnp.float32)
        for i in range(num_chunks):
            total += jnp.sum(x_vmem[i].astype(jnp.float32), axis=0, keepdims=True)
        o_ref[...] = total.astype(o_ref.dtype)

    pl.run_scoped(everything, pltpu.VMEM((num_chunks, chunk, x_hbm.shape[1]), x_hbm.dtype),
                  pltpu.SemaphoreType.DMA((num_chunks,)))
