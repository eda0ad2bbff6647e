"""pipelining.copy_loop: sums the chunk buffer before waiting for its copy."""
PUZZLE = "pipelining.copy_loop"
EXPECT = "start the copy, wait for it, and only then sum chunk_vmem"


def column_sum_kernel(x_hbm, o_ref, chunk_vmem, sem, *, chunk):
    def add_chunk(i, total):
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(i * chunk, chunk)], chunk_vmem, sem)
        copy.start()
        total = total + jnp.sum(chunk_vmem[...], axis=0, keepdims=True)
        copy.wait()
        return total

    o_ref[...] = lax.fori_loop(0, x_hbm.shape[0] // chunk, add_chunk,
                               jnp.zeros(o_ref.shape, jnp.float32))
