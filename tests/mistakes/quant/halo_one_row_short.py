"""quant.halo: the window is block_h + KH - 2 rows, one short of the halo: the last tap
reads one row past the window's end."""
PUZZLE = "quant.halo"
EXPECT = "a halo of KH - 1 after them"


def conv2d_rows(x, w, *, block_h=8):
    B, H, W, C = x.shape
    KH, KW, _, F = w.shape
    top, left = (KH - 1) // 2, (KW - 1) // 2
    tiles = pl.cdiv(H, block_h)
    window = block_h + KH - 2
    Hp = tiles * block_h + KH - 1
    Wp = W + KW - 1
    x = jnp.pad(x, ((0, 0), (top, Hp - H - top), (left, Wp - W - left), (0, 0)))
    rows = x.reshape(B * Hp, Wp, C)

    def window_start(b, i):
        return (b * Hp + i * block_h, 0, 0)

    return pl.pallas_call(
        conv_kernel,
        out_shape=jax.ShapeDtypeStruct((B, H, W, F), x.dtype),
        grid=(B, tiles),
        in_specs=[pl.BlockSpec((pl.Element(window), pl.Element(Wp), pl.Element(C)),
                               window_start),
                  pl.BlockSpec((KH, KW, C, F), lambda b, i: (0, 0, 0, 0))],
        out_specs=pl.BlockSpec((None, block_h, W, F), lambda b, i: (b, i, 0, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(rows, w)
