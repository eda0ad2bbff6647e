"""quant.halo: each grid step gets the whole padded image and slices its rows in VMEM:
right values and few bytes, but the image must fit in VMEM."""
PUZZLE = "quant.halo"
EXPECT = "hold a window of rows in VMEM, not the whole image"


def conv2d_rows(x, w, *, block_h=8):
    B, H, W, C = x.shape
    KH, KW, _, F = w.shape
    top, left = (KH - 1) // 2, (KW - 1) // 2
    tiles = pl.cdiv(H, block_h)
    Hp = tiles * block_h + KH - 1
    Wp = W + KW - 1
    x = jnp.pad(x, ((0, 0), (top, Hp - H - top), (left, Wp - W - left), (0, 0)))

    def kernel(x_ref, w_ref, o_ref):
        first = pl.program_id(1) * block_h
        acc = jnp.zeros(o_ref.shape, jnp.float32)
        for kh in range(KH):
            for kw in range(KW):
                patch = x_ref[pl.ds(first + kh, block_h), pl.ds(kw, W), :]
                acc += jnp.einsum("hwc,cf->hwf", patch, w_ref[kh, kw],
                                  preferred_element_type=jnp.float32)
        o_ref[...] = acc.astype(o_ref.dtype)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((B, H, W, F), x.dtype),
        grid=(B, tiles),
        in_specs=[pl.BlockSpec((None, Hp, Wp, C), lambda b, i: (b, 0, 0, 0)),
                  pl.BlockSpec((KH, KW, C, F), lambda b, i: (0, 0, 0, 0))],
        out_specs=pl.BlockSpec((None, block_h, W, F), lambda b, i: (b, i, 0, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(x, w)
