"""A shortcut past the two-slot ring: the SMEM ring has two slots (as checked) but only slot 0 is
ever used; the producer waits for the consumer to release it before every copy after the
first, so producer and consumer never overlap (a serial handshake, not a ring)."""
PUZZLE = "hopper.warpgroups"
EXPECT = "your producer never has a tile ahead"


def add_one_specialized_kernel(x_ref, o_ref, tiles, loaded, consumed, *, block_rows):
    steps = x_ref.shape[0] // block_rows

    @pl.when(lax.axis_index("wg") == 1)
    def producer():
        @pl.loop(0, steps)
        def fetch(i):
            @pl.when(i >= 1)
            def wait_until_released():
                plgpu.barrier_wait(consumed.at[0])

            plgpu.copy_gmem_to_smem(x_ref.at[pl.ds(i * block_rows, block_rows)],
                                    tiles.at[0], loaded.at[0])

    @pl.when(lax.axis_index("wg") == 0)
    def consumer():
        @pl.loop(0, steps)
        def compute(i):
            plgpu.barrier_wait(loaded.at[0])
            o_ref[pl.ds(i * block_rows, block_rows)] = tiles[0] + 1
            plgpu.commit_smem()

            @pl.when(i + 1 < steps)
            def release():
                plgpu.barrier_arrive(consumed.at[0])
