"""hopper.wgmma: a and b loaded from global memory with plain loads and stored into the
SMEM tiles by hand, instead of TMA copies."""
PUZZLE = "hopper.wgmma"
EXPECT = "a and b reach their SMEM tiles by TMA"


def matmul_tile_kernel(a_ref, b_ref, o_ref, a_tile, b_tile, o_tile, landed):
    a_tile[...] = a_ref[...]
    b_tile[...] = b_ref[...]
    plgpu.commit_smem()

    def product(acc):
        plgpu.wgmma(acc, a_tile, b_tile)
        return acc[...]

    result = pl.run_scoped(product, plgpu.ACC(o_tile.shape, jnp.float32))
    o_tile[...] = result.astype(o_tile.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_tile, o_ref)
    plgpu.wait_smem_to_gmem(0)
