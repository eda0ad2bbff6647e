"""pipelining.double_buffer: chunk i is waited on the other slot's semaphore: the wait
takes the bytes of chunk i + 1's copy, and chunk i's copy is never waited."""
PUZZLE = "pipelining.double_buffer"
EXPECT = "names another semaphore (or slot) than that copy signals"


def double_buffered_kernel(x_hbm, o_ref, chunks_vmem, sems, *, chunk):
    num_chunks = x_hbm.shape[0] // chunk

    def chunk_copy(i, slot):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(i * chunk, chunk)], chunks_vmem.at[slot],
                                     sems.at[slot])

    chunk_copy(0, 0).start()   # the first chunk has nothing to hide behind

    def add_chunk(i, total):
        slot = i % 2

        @pl.when(i + 1 < num_chunks)
        def fetch_next():          # into the other slot, while this one is summed
            chunk_copy(i + 1, 1 - slot).start()

        pltpu.make_async_copy(x_hbm.at[pl.ds(i * chunk, chunk)], chunks_vmem.at[slot],
                              sems.at[1 - slot]).wait()   # the other slot's semaphore
        return total + jnp.sum(chunks_vmem[slot].astype(jnp.float32), axis=0, keepdims=True)

    total = lax.fori_loop(0, num_chunks, add_chunk, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = total.astype(o_ref.dtype)
