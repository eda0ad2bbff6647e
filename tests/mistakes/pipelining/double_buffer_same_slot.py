"""pipelining.double_buffer: fetches chunk i + 1 into the slot chunk i is still landing in."""
PUZZLE = "pipelining.double_buffer"
EXPECT = "chunk i + 1 goes into the other slot"


def double_buffered_kernel(x_hbm, o_ref, chunks_vmem, sems, *, chunk):
    num_chunks = x_hbm.shape[0] // chunk

    def chunk_copy(i, slot):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(i * chunk, chunk)], chunks_vmem.at[slot],
                                     sems.at[slot])

    chunk_copy(0, 0).start()

    def add_chunk(i, total):
        slot = i % 2

        @pl.when(i + 1 < num_chunks)
        def fetch_next():
            chunk_copy(i + 1, slot).start()

        chunk_copy(i, slot).wait()
        return total + jnp.sum(chunks_vmem[slot], axis=0, keepdims=True)

    o_ref[...] = lax.fori_loop(0, num_chunks, add_chunk, jnp.zeros(o_ref.shape, jnp.float32))
