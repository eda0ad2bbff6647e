"""hopper.tma: the copy in is a TMA copy, but the result is stored into o_ref with a plain
store, bypassing the TMA engine (and its commit and wait)."""
PUZZLE = "hopper.tma"
EXPECT = "bypass the TMA engine"


def add_one_tma_kernel(x_ref, o_ref, tile, landed, *, block_rows):
    rows = pl.ds(lax.axis_index("blocks") * block_rows, block_rows)
    plgpu.copy_gmem_to_smem(x_ref.at[rows], tile, landed)
    plgpu.barrier_wait(landed)
    tile[...] = tile[...] + 1
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(tile, o_ref.at[rows])
    plgpu.wait_smem_to_gmem(0)
    o_ref[rows] = tile[...]
