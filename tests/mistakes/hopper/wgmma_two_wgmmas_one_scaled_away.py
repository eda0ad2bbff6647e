"""A decoy: two wgmmas on the TMA-loaded tiles, the second's accumulator joins the result
scaled by 2^-60 (a constant factor: used, but rounded away). The first does the work."""
PUZZLE = "hopper.wgmma"
EXPECT = "reads of a wgmma accumulator in your kernels (acc[...]) move no output"


def matmul_tile_kernel(a_ref, b_ref, o_ref, a_tile, b_tile, o_tile, landed):
    plgpu.copy_gmem_to_smem(a_ref, a_tile, landed.at[0])
    plgpu.copy_gmem_to_smem(b_ref, b_tile, landed.at[1])
    plgpu.barrier_wait(landed.at[0])
    plgpu.barrier_wait(landed.at[1])

    def product(acc):
        plgpu.wgmma(acc, a_tile, b_tile)
        return acc[...]

    def decoy(acc):
        plgpu.wgmma(acc, a_tile, b_tile)
        return acc[...]

    real = pl.run_scoped(product, plgpu.ACC(o_tile.shape, jnp.float32))
    result = pl.run_scoped(decoy, plgpu.ACC(o_tile.shape, jnp.float32))
    o_tile[...] = (real + result * (2.0 ** -60)).astype(o_tile.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_tile, o_ref)
    plgpu.wait_smem_to_gmem(0)
