"""hopper.warpgroups: the consumer arrives on consumed[slot] after every tile; the
producer waits only for the slots it refills, so the last arrivals are never waited
(GPU interpret mode does not count them; a Hopper requires it)."""
PUZZLE = "hopper.warpgroups"
EXPECT = 'a barrier ends the kernel with completions nobody waited for'


def add_one_specialized_kernel(x_ref, o_ref, tiles, loaded, consumed, *, block_rows):
    steps = x_ref.shape[0] // block_rows
    slots = tiles.shape[0]

    @pl.when(lax.axis_index("wg") == 1)
    def producer():
        @pl.loop(0, steps)
        def fetch(i):
            slot = lax.rem(i, slots)

            @pl.when(i >= slots)
            def wait_until_released():
                plgpu.barrier_wait(consumed.at[slot])

            plgpu.copy_gmem_to_smem(x_ref.at[pl.ds(i * block_rows, block_rows)],
                                    tiles.at[slot], loaded.at[slot])

    @pl.when(lax.axis_index("wg") == 0)
    def consumer():
        @pl.loop(0, steps)
        def compute(i):
            slot = lax.rem(i, slots)
            plgpu.barrier_wait(loaded.at[slot])
            o_ref[pl.ds(i * block_rows, block_rows)] = tiles[slot] + 1
            plgpu.commit_smem()   # the reads are done before the slot is refilled

            plgpu.barrier_arrive(consumed.at[slot])
