"""pipelining.copy_loop: copies x.at[pl.ds(0, chunk)] at every step: chunk 0 each time."""
PUZZLE = "pipelining.copy_loop"
EXPECT = "your copies do not read each row of x once"


def column_sum_kernel(x_hbm, o_ref, chunk_vmem, sem, *, chunk):
    def add_chunk(i, total):
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(0, chunk)], chunk_vmem, sem)
        copy.start()
        copy.wait()
        return total + jnp.sum(chunk_vmem[...], axis=0, keepdims=True)

    o_ref[...] = lax.fori_loop(0, x_hbm.shape[0] // chunk, add_chunk,
                               jnp.zeros(o_ref.shape, jnp.float32))
