"""hopper.matmul: b's index map gives (n, k), where b's (tile_k, tile_n) tiles are at (k, n):
its copies read past the end of b (zeros on a Hopper) and the wrong tiles."""
PUZZLE = "hopper.matmul"
EXPECT = 'reads past the end of its GMEM ref'


def matmul_kernel(a_ref, b_ref, o_ref, o_tile, *, tile_m, tile_n, tile_k,
                  max_concurrent_steps):
    K = a_ref.shape[1]
    m, n = lax.axis_index("m"), lax.axis_index("n")
    transforms = wgmma_transforms(tile_k, a_ref.dtype)

    def product(acc):
        def step(indices, a_tile, b_tile):
            plgpu.wgmma(acc, a_tile, b_tile)
            plgpu.wgmma_wait(0)   # done reading the slots before the pipeline refills them

        plgpu.emit_pipeline(
            step,
            grid=(K // tile_k,),
            in_specs=[
                plgpu.BlockSpec((tile_m, tile_k), lambda k: (m, k), transforms=transforms),
                plgpu.BlockSpec((tile_k, tile_n), lambda k: (n, k), transforms=transforms),
            ],
            max_concurrent_steps=max_concurrent_steps,
        )(a_ref, b_ref)
        return acc[...]

    result = pl.run_scoped(product, plgpu.ACC((tile_m, tile_n), jnp.float32))
    o_tile[...] = result.astype(o_tile.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_tile, o_ref.at[pl.ds(m * tile_m, tile_m),
                                             pl.ds(n * tile_n, tile_n)])
    plgpu.wait_smem_to_gmem(0)
