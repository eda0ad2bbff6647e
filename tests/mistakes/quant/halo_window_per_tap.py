"""quant.halo: one window of block_h rows per kernel row kh, each fetched from HBM: every
input row is read KH times."""
PUZZLE = "quant.halo"
EXPECT = "read each input row once per window, not once per tap"


def conv2d_rows(x, w, *, block_h=8):
    B, H, W, C = x.shape
    KH, KW, _, F = w.shape
    top, left = (KH - 1) // 2, (KW - 1) // 2
    tiles = pl.cdiv(H, block_h)
    Hp = tiles * block_h + KH - 1
    Wp = W + KW - 1
    x = jnp.pad(x, ((0, 0), (top, Hp - H - top), (left, Wp - W - left), (0, 0)))
    rows = x.reshape(B * Hp, Wp, C)

    def kernel(*refs):
        x_refs, w_ref, o_ref = refs[:KH], refs[KH], refs[KH + 1]
        acc = jnp.zeros(o_ref.shape, jnp.float32)
        for kh in range(KH):
            for kw in range(KW):
                patch = x_refs[kh][:, pl.ds(kw, W), :]
                acc += jnp.einsum("hwc,cf->hwf", patch, w_ref[kh, kw],
                                  preferred_element_type=jnp.float32)
        o_ref[...] = acc.astype(o_ref.dtype)

    def tap_rows(kh):
        return pl.BlockSpec((pl.Element(block_h), pl.Element(Wp), pl.Element(C)),
                            lambda b, i: (b * Hp + i * block_h + kh, 0, 0))

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((B, H, W, F), x.dtype),
        grid=(B, tiles),
        in_specs=[tap_rows(kh) for kh in range(KH)]
                 + [pl.BlockSpec((KH, KW, C, F), lambda b, i: (0, 0, 0, 0))],
        out_specs=pl.BlockSpec((None, block_h, W, F), lambda b, i: (b, i, 0, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(*[rows] * KH, w)
