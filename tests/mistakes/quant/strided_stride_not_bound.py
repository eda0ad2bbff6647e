"""quant.strided: conv_kernel called without its stride: the patches are read at stride 1."""
PUZZLE = "quant.strided"
EXPECT = "conv_kernel's stride defaults to 1, so bind it"


def conv2d(x, w, *, stride=1, block_h=8, block_f=None):
    name = "conv2d"
    _check_array(name, "x", x, 4, [jnp.floating], "float [B, H, W, C]")
    _check_array(name, "w", w, 4, [jnp.floating], "float [KH, KW, C, F]")
    B, H, W, C = x.shape
    KH, KW, _, F = w.shape
    if w.shape[2] != C or w.dtype != x.dtype:
        raise ValueError(f"{name}: w must be [KH, KW, C, F] with x's C={C} and dtype "
                         f"{x.dtype}; got {w.shape} {w.dtype}")
    if not isinstance(stride, int) or stride < 1:
        raise ValueError(f"{name}: stride={stride!r} must be a positive int")
    if not isinstance(block_h, int) or block_h < 1:
        raise ValueError(f"{name}: block_h={block_h!r} must be a positive int")
    if block_f is None:
        block_f = F
    _check_block(name, "block_f", block_f, 1 if block_f >= F else 128)
    block_f = min(block_f, F)
    Ho, top, _ = same_padding(H, KH, stride)
    Wo, left, _ = same_padding(W, KW, stride)
    tiles = pl.cdiv(Ho, block_h)
    window = (block_h - 1) * stride + KH    # input rows behind block_h output rows
    # Every window inside the padded image, and the image inside it: a filter smaller than
    # the stride needs no padding, and leaves the last row (column) of an even image unread.
    Hp = max((tiles * block_h - 1) * stride + KH, top + H)
    Wp = max((Wo - 1) * stride + KW, left + W)
    x = jnp.pad(x, ((0, 0), (top, Hp - H - top), (left, Wp - W - left), (0, 0)))
    rows = x.reshape(B * Hp, Wp, C)

    def window_start(b, i, f):   # the same window for every f: it stays in VMEM
        return (b * Hp + i * block_h * stride, 0, 0)

    return pl.pallas_call(
        conv_kernel,
        out_shape=jax.ShapeDtypeStruct((B, Ho, Wo, F), x.dtype),
        grid=(B, tiles, pl.cdiv(F, block_f)),    # output channels last
        in_specs=[pl.BlockSpec((pl.Element(window), pl.Element(Wp), pl.Element(C)),
                               window_start),
                  pl.BlockSpec((KH, KW, C, block_f), lambda b, i, f: (0, 0, 0, f))],
        out_specs=pl.BlockSpec((None, block_h, Wo, block_f), lambda b, i, f: (b, i, 0, f)),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel")),
    )(rows, w)
