"""Slip: plgpu.wgmma(acc, b_tile, a_tile), the operands swapped: b @ a; diagnosis should point at the operand order."""
PUZZLE = "hopper.wgmma"
EXPECT = 'your output is b @ a'


def matmul_tile_kernel(a_ref, b_ref, o_ref, a_tile, b_tile, o_tile, landed):
    plgpu.copy_gmem_to_smem(a_ref, a_tile, landed.at[0])
    plgpu.copy_gmem_to_smem(b_ref, b_tile, landed.at[1])
    plgpu.barrier_wait(landed.at[0])
    plgpu.barrier_wait(landed.at[1])

    def product(acc):
        plgpu.wgmma(acc, b_tile, a_tile)   # acc += a_tile @ b_tile on the tensor core
        return acc[...]                    # reading it waits for the wgmma

    result = pl.run_scoped(product, plgpu.ACC(o_tile.shape, jnp.float32))
    o_tile[...] = result.astype(o_tile.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_tile, o_ref)
    plgpu.wait_smem_to_gmem(0)
