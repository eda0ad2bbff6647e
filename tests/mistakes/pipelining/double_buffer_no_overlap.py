"""pipelining.double_buffer: two slots, but each copy is waited before the next starts."""
PUZZLE = "pipelining.double_buffer"
EXPECT = "start chunk i + 1 (into the other slot) first, then wait for chunk i"


def double_buffered_kernel(x_hbm, o_ref, chunks_vmem, sems, *, chunk):
    def add_chunk(i, total):
        slot = i % 2
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(i * chunk, chunk)], chunks_vmem.at[slot],
                                     sems.at[slot])
        copy.start()
        copy.wait()
        return total + jnp.sum(chunks_vmem[slot], axis=0, keepdims=True)

    o_ref[...] = lax.fori_loop(0, x_hbm.shape[0] // chunk, add_chunk,
                               jnp.zeros(o_ref.shape, jnp.float32))
