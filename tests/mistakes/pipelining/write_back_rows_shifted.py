"""relu_kernel: the write-back's destination rows(i + 1) (off by one chunk) instead of rows(i)."""
PUZZLE = "pipelining.write_back"
EXPECT = "a slice starts at"


def relu_kernel(x_hbm, o_hbm, in_vmem, out_vmem, read_sem, write_sem, *, chunk):
    num_chunks = x_hbm.shape[0] // chunk

    def rows(i):
        return pl.ds(i * chunk, chunk)

    def read(i):
        return pltpu.make_async_copy(x_hbm.at[rows(i)], in_vmem, read_sem)

    def write(i):
        return pltpu.make_async_copy(out_vmem, o_hbm.at[rows(i + 1)], write_sem)

    @pl.loop(0, num_chunks)
    def relu_chunk(i):
        read(i).start()
        read(i).wait()
        y = jnp.maximum(in_vmem[...], 0)   # computed while write(i - 1) is landing

        @pl.when(i > 0)
        def previous_write_done():   # out_vmem is the source of write(i - 1)
            write(i - 1).wait()

        out_vmem[...] = y
        write(i).start()           # lands while the next chunk is read and computed

    write(num_chunks - 1).wait()
