"""hopper.tma on a 3-D view of x, [M / block_rows, block_rows, D] (a reshape around the
kernel moves no element), so that the block's tile is x_ref.at[i]; the add written in
place (tile[...] += 1) and the barrier handed over as landed.at[0] of an array of one."""
PUZZLE = "hopper.tma"


def _tile_add_kernel(x_ref, o_ref, tile, landed):
    i = lax.axis_index("tiles")
    plgpu.copy_gmem_to_smem(x_ref.at[i], tile, landed.at[0])
    plgpu.barrier_wait(landed.at[0])
    tile[...] += 1
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(tile, o_ref.at[i])
    plgpu.wait_smem_to_gmem(0)


def add_one_tma(x, *, block_rows=64):
    M, D = x.shape
    _check_divides("add_one_tma", "block_rows", block_rows, M, "M")
    tiles = M // block_rows
    out = plgpu.kernel(
        _tile_add_kernel,
        out_type=jax.ShapeDtypeStruct((tiles, block_rows, D), x.dtype),
        grid=(tiles,),
        grid_names=("tiles",),
        scratch_types=[plgpu.SMEM((block_rows, D), x.dtype),
                       plgpu.Barrier(num_barriers=1)],
    )(x.reshape(tiles, block_rows, D))
    return out.reshape(M, D)
