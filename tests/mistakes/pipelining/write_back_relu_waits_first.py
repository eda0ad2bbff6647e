"""pipelining.write_back: the previous write-back is waited before the relu is computed,
so the core sits idle while it lands (the copies still overlap each other)."""
PUZZLE = "pipelining.write_back"
EXPECT = "Compute chunk i's relu first"


def relu_kernel(x_hbm, o_hbm, in_vmem, out_vmem, read_sem, write_sem, *, chunk):
    num_chunks = x_hbm.shape[0] // chunk

    def rows(i):
        return pl.ds(i * chunk, chunk)

    def read(i):
        return pltpu.make_async_copy(x_hbm.at[rows(i)], in_vmem, read_sem)

    def write(i):
        return pltpu.make_async_copy(out_vmem, o_hbm.at[rows(i)], write_sem)

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
