"""hopper.warpgroups: both slots are used in turn, but the producer waits for the tile
just before to be released before it copies the next one, so copy and compute take
turns: a handshake, not a ring."""
PUZZLE = "hopper.warpgroups"
EXPECT = "your producer never has a tile ahead"


def add_one_specialized_kernel(x_ref, o_ref, tiles, loaded, consumed, *, block_rows):
    steps = x_ref.shape[0] // block_rows
    slots = tiles.shape[0]

    @pl.when(lax.axis_index("wg") == 1)
    def producer():
        @pl.loop(0, steps)
        def fetch(i):
            slot = lax.rem(i, slots)

            @pl.when(i >= 1)
            def wait_until_the_last_tile_is_released():
                plgpu.barrier_wait(consumed.at[lax.rem(i - 1, slots)])

            plgpu.copy_gmem_to_smem(x_ref.at[pl.ds(i * block_rows, block_rows)],
                                    tiles.at[slot], loaded.at[slot])

    @pl.when(lax.axis_index("wg") == 0)
    def consumer():
        @pl.loop(0, steps)
        def compute(i):
            slot = lax.rem(i, slots)
            plgpu.barrier_wait(loaded.at[slot])
            o_ref[pl.ds(i * block_rows, block_rows)] = tiles[slot] + 1
            plgpu.commit_smem()

            @pl.when(i + 1 < steps)
            def release():
                plgpu.barrier_arrive(consumed.at[slot])
