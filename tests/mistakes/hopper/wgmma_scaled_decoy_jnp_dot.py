"""A shortcut: the tile's product is computed from registers with jnp.dot (no Mosaic GPU
lowering, but interpret mode runs it); the wgmma runs on the
TMA-loaded tiles and its accumulator joins the result scaled by 2^-60 (a constant
factor: used, but rounded away)."""
PUZZLE = "hopper.wgmma"
EXPECT = "has no Mosaic GPU lowering"


def matmul_tile_kernel(a_ref, b_ref, o_ref, a_tile, b_tile, o_tile, landed):
    plgpu.copy_gmem_to_smem(a_ref, a_tile, landed.at[0])
    plgpu.copy_gmem_to_smem(b_ref, b_tile, landed.at[1])
    plgpu.barrier_wait(landed.at[0])
    plgpu.barrier_wait(landed.at[1])

    def product(acc):
        plgpu.wgmma(acc, a_tile, b_tile)
        return acc[...]

    result = pl.run_scoped(product, plgpu.ACC(o_tile.shape, jnp.float32))
    vpu = jnp.dot(a_tile[...], b_tile[...], preferred_element_type=jnp.float32)
    o_tile[...] = (vpu + result * (2.0 ** -60)).astype(o_tile.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_tile, o_ref)
    plgpu.wait_smem_to_gmem(0)
