"""pipelining.write_back: waits for each write-back right after starting it, so no
write-back ever overlaps the next read."""
PUZZLE = "pipelining.write_back"
EXPECT = "each write-back is waited right after it starts"


def relu_kernel(x_hbm, o_hbm, in_vmem, out_vmem, read_sem, write_sem, *, chunk):
    @pl.loop(0, x_hbm.shape[0] // chunk)
    def relu_chunk(i):
        rows = pl.ds(i * chunk, chunk)
        read = pltpu.make_async_copy(x_hbm.at[rows], in_vmem, read_sem)
        read.start()
        read.wait()
        out_vmem[...] = jnp.maximum(in_vmem[...], 0)
        write = pltpu.make_async_copy(out_vmem, o_hbm.at[rows], write_sem)
        write.start()
        write.wait()
