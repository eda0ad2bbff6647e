"""pipelining.write_back: reads and write-backs share one semaphore, so a read's wait
could return when the previous write-back landed instead (a race on a TPU)."""
PUZZLE = "pipelining.write_back"
EXPECT = "Give reads and writes a semaphore each"


def relu_kernel(x_hbm, o_hbm, in_vmem, out_vmem, read_sem, write_sem, *, chunk):
    num_chunks = x_hbm.shape[0] // chunk

    def rows(i):
        return pl.ds(i * chunk, chunk)

    def read(i):
        return pltpu.make_async_copy(x_hbm.at[rows(i)], in_vmem, read_sem)

    def write(i):
        return pltpu.make_async_copy(out_vmem, o_hbm.at[rows(i)], read_sem)

    @pl.loop(0, num_chunks)
    def relu_chunk(i):
        read(i).start()
        read(i).wait()

        @pl.when(i > 0)
        def previous_write_done():
            write(i - 1).wait()

        out_vmem[...] = jnp.maximum(in_vmem[...], 0)
        write(i).start()

    write(num_chunks - 1).wait()
