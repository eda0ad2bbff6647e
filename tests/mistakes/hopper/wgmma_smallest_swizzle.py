"""hopper.wgmma: the smallest swizzle that fits, not the widest."""
PUZZLE = "hopper.wgmma"
EXPECT = 'take the widest that fits'


def wgmma_transforms(cols, dtype):
    row_bytes = cols * jnp.dtype(dtype).itemsize
    swizzle = next((s for s in (32, 64, 128) if row_bytes % s == 0), None)
    if swizzle is None:
        raise ValueError(f"wgmma_transforms: rows of {cols} {jnp.dtype(dtype).name} "
                         f"({row_bytes} bytes) fit no swizzle of 128, 64 or 32 bytes")
    return (plgpu.TilingTransform((8, swizzle // jnp.dtype(dtype).itemsize)),
            plgpu.SwizzleTransform(swizzle))
