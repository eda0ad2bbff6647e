"""hopper.wgmma: a shortcut. The product is jnp.dot on the SMEM tiles, and a wgmma runs
beside it only to be counted: jnp.dot has no Mosaic GPU lowering (GPU interpret mode
runs it; a Hopper does not compile the kernel)."""
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

    pl.run_scoped(product, plgpu.ACC(o_tile.shape, jnp.float32))
    result = jnp.dot(a_tile[...], b_tile[...], preferred_element_type=jnp.float32)
    o_tile[...] = result.astype(o_tile.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_tile, o_ref)
    plgpu.wait_smem_to_gmem(0)
