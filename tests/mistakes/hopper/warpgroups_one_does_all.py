"""hopper.warpgroups: one warpgroup fetches, computes and stores every tile; the other
only arrives once on a barrier, so nothing is specialised."""
PUZZLE = "hopper.warpgroups"
EXPECT = "the warpgroups do not split the work"


def add_one_specialized_kernel(x_ref, o_ref, tiles, loaded, consumed, *, block_rows):
    steps = x_ref.shape[0] // block_rows
    slots = tiles.shape[0]

    @pl.when(lax.axis_index("wg") == 1)
    def idle():
        plgpu.barrier_arrive(consumed.at[0])

    @pl.when(lax.axis_index("wg") == 0)
    def everything():
        plgpu.barrier_wait(consumed.at[0])

        @pl.loop(0, steps)
        def step(i):
            slot = lax.rem(i, slots)
            plgpu.copy_gmem_to_smem(x_ref.at[pl.ds(i * block_rows, block_rows)],
                                    tiles.at[slot], loaded.at[slot])
            plgpu.barrier_wait(loaded.at[slot])
            o_ref[pl.ds(i * block_rows, block_rows)] = tiles[slot] + 1
            plgpu.commit_smem()
