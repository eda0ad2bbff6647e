"""hopper.warpgroups: the consumer stores tile i into the rows of its slot, not of the tile."""
PUZZLE = "hopper.warpgroups"
EXPECT = "the tile's rows, not its slot's"
AVOID = "initialise it under pl.when"


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
            o_ref[pl.ds(slot * block_rows, block_rows)] = tiles[slot] + 1
            plgpu.commit_smem()   # the reads are done before the slot is refilled

            @pl.when(i + slots < steps)   # only a slot that will be refilled is released
            def release():
                plgpu.barrier_arrive(consumed.at[slot])


