"""hopper.tma: the tile is read right after the copy into it is started: the copy may
not have landed (a race, named with both lines)."""
PUZZLE = "hopper.tma"
EXPECT = "Call plgpu.barrier_wait(landed) right after it"


def add_one_tma_kernel(x_ref, o_ref, tile, landed, *, block_rows):
    rows = pl.ds(lax.axis_index("blocks") * block_rows, block_rows)
    plgpu.copy_gmem_to_smem(x_ref.at[rows], tile, landed)
    tile[...] = tile[...] + 1
    plgpu.barrier_wait(landed)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(tile, o_ref.at[rows])
    plgpu.wait_smem_to_gmem(0)
