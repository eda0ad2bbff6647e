"""hopper.wgmma: a_tile and b_tile are plain row-major SMEM: interpret mode multiplies
them, a Hopper's tensor core cannot read them."""
PUZZLE = "hopper.wgmma"
EXPECT = "allocate a_tile and b_tile with transforms=wgmma_transforms(K, a.dtype)"


def matmul_tile(a, b):
    M, K = a.shape
    _, N = b.shape
    _check_16_bit("matmul_tile", a, b)
    return plgpu.kernel(
        matmul_tile_kernel,
        out_type=jax.ShapeDtypeStruct((M, N), a.dtype),
        scratch_types=[
            plgpu.SMEM((M, K), a.dtype),
            plgpu.SMEM((K, N), b.dtype),
            plgpu.SMEM((M, N), a.dtype),
            plgpu.Barrier(num_barriers=2),
        ],
    )(a, b)
