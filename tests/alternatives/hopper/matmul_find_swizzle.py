"""hopper.matmul with the SMEM layout spelled as JAX's hopper_matmul_mgpu spells it
(plgpu.find_swizzle on the tile's row bits, the tiling from the swizzle), the grid axes
named ("row", "col"), the pipeline's index maps as named functions, the accumulator
handed to pl.run_scoped by keyword and the epilogue's window taken with .at twice."""
PUZZLE = "hopper.matmul"


def _tiled_matmul_kernel(a_ref, b_ref, o_ref, o_tile, *, tile_m, tile_n, tile_k, depth):
    row, col = lax.axis_index("row"), lax.axis_index("col")
    swizzle = plgpu.find_swizzle(tile_k * jnp.dtype(a_ref.dtype).itemsize * 8)
    layout = (plgpu.TilingTransform((8, swizzle // jnp.dtype(a_ref.dtype).itemsize)),
              plgpu.SwizzleTransform(swizzle))

    def a_block(k):
        return row, k

    def b_block(k):
        return k, col

    def mma(indices, a_tile, b_tile, acc):
        plgpu.wgmma(acc, a_tile, b_tile)
        plgpu.wgmma_wait(0)
        return acc

    def accumulate(acc):
        plgpu.emit_pipeline(
            lambda indices, a_tile, b_tile: mma(indices, a_tile, b_tile, acc),
            grid=(a_ref.shape[1] // tile_k,),
            in_specs=[plgpu.BlockSpec((tile_m, tile_k), a_block, transforms=layout),
                      plgpu.BlockSpec((tile_k, tile_n), b_block, transforms=layout)],
            max_concurrent_steps=depth,
        )(a_ref, b_ref)
        return acc[...]

    o_tile[...] = pl.run_scoped(accumulate, acc=plgpu.ACC((tile_m, tile_n), jnp.float32)
                                ).astype(o_tile.dtype)
    plgpu.commit_smem()
    window = o_ref.at[pl.ds(row * tile_m, tile_m)].at[:, pl.ds(col * tile_n, tile_n)]
    plgpu.copy_smem_to_gmem(o_tile, window)
    plgpu.wait_smem_to_gmem(0)


def matmul(a, b, *, tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2):
    (M, K), (K_b, N) = a.shape, b.shape
    if K != K_b:
        raise ValueError(f"matmul: a [M, K] = {a.shape} and b [K, N] = {b.shape} differ "
                         "in K")
    if a.dtype != b.dtype:
        raise ValueError(f"matmul: a is {a.dtype}, b is {b.dtype}: one dtype for both")
    _check_16_bit("matmul", a, b)
    for argument, tile, size, dim in (("tile_m", tile_m, M, "M"), ("tile_n", tile_n, N, "N"),
                                      ("tile_k", tile_k, K, "K")):
        _check_divides("matmul", argument, tile, size, dim)
    if max_concurrent_steps < 1:
        raise ValueError(f"matmul: max_concurrent_steps={max_concurrent_steps} must be at "
                         "least 1")
    return plgpu.kernel(
        functools.partial(_tiled_matmul_kernel, tile_m=tile_m, tile_n=tile_n,
                          tile_k=tile_k, depth=min(max_concurrent_steps, K // tile_k)),
        out_type=jax.ShapeDtypeStruct((M, N), a.dtype),
        grid=(M // tile_m, N // tile_n),
        grid_names=("row", "col"),
        scratch_types=[plgpu.SMEM((tile_m, tile_n), a.dtype)],
    )(a, b)
