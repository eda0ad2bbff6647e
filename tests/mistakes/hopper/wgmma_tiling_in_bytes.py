"""hopper.wgmma: the tiling counts the swizzle in bytes, not elements."""
PUZZLE = "hopper.wgmma"
EXPECT = 'the TilingTransform counts elements, not bytes'


def wgmma_transforms(cols, dtype):
    row_bytes = cols * jnp.dtype(dtype).itemsize
    swizzle = next((s for s in (128, 64, 32) if row_bytes % s == 0), None)
    if swizzle is None:
        raise ValueError(f"wgmma_transforms: rows of {cols} {jnp.dtype(dtype).name} "
                         f"({row_bytes} bytes) fit no swizzle of 128, 64 or 32 bytes")
    return (plgpu.TilingTransform((8, swizzle)),
            plgpu.SwizzleTransform(swizzle))
