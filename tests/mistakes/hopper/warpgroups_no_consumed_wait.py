"""hopper.warpgroups: the producer copies tile i + 2 into a slot without waiting for the
consumer to release it: the copy overwrites a tile still being read."""
PUZZLE = "hopper.warpgroups"
EXPECT = "before copying into it again"


def add_one_specialized_kernel(x_ref, o_ref, tiles, loaded, consumed, *, block_rows):
    steps = x_ref.shape[0] // block_rows
    slots = tiles.shape[0]

    @pl.when(lax.axis_index("wg") == 1)
    def producer():
        @pl.loop(0, steps)
        def fetch(i):
            slot = lax.rem(i, slots)
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

            @pl.when(i + slots < steps)
            def release():
                plgpu.barrier_arrive(consumed.at[slot])
