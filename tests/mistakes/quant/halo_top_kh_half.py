"""Slip: top = KH // 2 instead of (KH - 1) // 2 (and left = KW // 2): identical for odd filters, wrong for even ones."""
PUZZLE = "quant.halo"
EXPECT = 'with an even filter side your padding put the larger half before'


def conv2d_rows(x, w, *, block_h=8):
    name = "conv2d_rows"
    _check_array(name, "x", x, 4, [jnp.floating], "float [B, H, W, C]")
    _check_array(name, "w", w, 4, [jnp.floating], "float [KH, KW, C, F]")
    B, H, W, C = x.shape
    KH, KW, _, F = w.shape
    if w.shape[2] != C or w.dtype != x.dtype:
        raise ValueError(f"{name}: w must be [KH, KW, C, F] with x's C={C} and dtype "
                         f"{x.dtype}; got {w.shape} {w.dtype}")
    if not isinstance(block_h, int) or block_h < 1:
        raise ValueError(f"{name}: block_h={block_h!r} must be a positive int")
    top = KH // 2
    left = KW // 2
    tiles = pl.cdiv(H, block_h)
    window = block_h + KH - 1               # the tile's rows and the KH - 1 rows below them
    Hp = tiles * block_h + KH - 1           # every window inside the padded image
    Wp = W + KW - 1
    x = jnp.pad(x, ((0, 0), (top, Hp - H - top), (left, Wp - W - left), (0, 0)))
    rows = x.reshape(B * Hp, Wp, C)         # one image after another, row by row

    def window_start(b, i):                 # element offsets, not block indices
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
