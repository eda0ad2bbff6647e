"""quant.strided: the filter's index map forgets the channel block: every block of
output channels is computed with the filter's first block_f channels."""
PUZZLE = "quant.strided"
EXPECT = "the filter's index map follows the channel block f"


def conv2d(x, w, *, stride=1, block_h=8, block_f=None):
    B, H, W, C = x.shape
    KH, KW, _, F = w.shape
    block_f = F if block_f is None else min(block_f, F)
    Ho, top, _ = same_padding(H, KH, stride)
    Wo, left, _ = same_padding(W, KW, stride)
    tiles = pl.cdiv(Ho, block_h)
    window = (block_h - 1) * stride + KH
    Hp = (tiles * block_h - 1) * stride + KH
    Wp = (Wo - 1) * stride + KW
    x = jnp.pad(x, ((0, 0), (top, Hp - H - top), (left, Wp - W - left), (0, 0)))
    rows = x.reshape(B * Hp, Wp, C)

    def window_start(b, i, f):
        return (b * Hp + i * block_h * stride, 0, 0)

    return pl.pallas_call(
        functools.partial(conv_kernel, stride=stride),
        out_shape=jax.ShapeDtypeStruct((B, Ho, Wo, F), x.dtype),
        grid=(B, tiles, pl.cdiv(F, block_f)),
        in_specs=[pl.BlockSpec((pl.Element(window), pl.Element(Wp), pl.Element(C)),
                               window_start),
                  pl.BlockSpec((KH, KW, C, block_f), lambda b, i, f: (0, 0, 0, 0))],
        out_specs=pl.BlockSpec((None, block_h, Wo, block_f), lambda b, i, f: (b, i, 0, f)),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel")),
    )(rows, w)
