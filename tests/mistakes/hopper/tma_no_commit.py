"""hopper.tma: no commit_smem between the store into the tile and the copy out: the TMA
engine may read the tile from before the store."""
PUZZLE = "hopper.tma"
EXPECT = "between the store into the tile and plgpu.copy_smem_to_gmem"


def add_one_tma_kernel(x_ref, o_ref, tile, landed, *, block_rows):
    rows = pl.ds(lax.axis_index("blocks") * block_rows, block_rows)
    plgpu.copy_gmem_to_smem(x_ref.at[rows], tile, landed)
    plgpu.barrier_wait(landed)
    tile[...] = tile[...] + 1
    plgpu.copy_smem_to_gmem(tile, o_ref.at[rows])
    plgpu.wait_smem_to_gmem(0)
