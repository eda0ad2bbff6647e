"""wgmma tile: the product is computed in registers on the CUDA cores (broadcast
multiply, sum over K, in float32); the wgmma runs as a decoy and its accumulator enters
the result at a 1% share. Dodges 'one tile on the tensor core'."""
PUZZLE = "hopper.wgmma"
EXPECT = "in a pattern that is a matrix product"


def matmul_tile_kernel(a_ref, b_ref, o_ref, a_tile, b_tile, o_tile, landed):
    plgpu.copy_gmem_to_smem(a_ref, a_tile, landed.at[0])
    plgpu.copy_gmem_to_smem(b_ref, b_tile, landed.at[1])
    plgpu.barrier_wait(landed.at[0])
    plgpu.barrier_wait(landed.at[1])

    def product(acc):
        plgpu.wgmma(acc, a_tile, b_tile)
        return acc[...]

    mxu = pl.run_scoped(product, plgpu.ACC(o_tile.shape, jnp.float32))
    a = a_tile[...].astype(jnp.float32)
    b = b_tile[...].astype(jnp.float32)
    cores = jnp.sum(a[:, :, None] * b[None, :, :], axis=1)
    o_tile[...] = (0.99 * cores + 0.01 * mxu).astype(o_tile.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_tile, o_ref)
    plgpu.wait_smem_to_gmem(0)
