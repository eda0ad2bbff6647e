"""quant.halo: the taps summed in x's dtype: in bf16 every einsum returns bf16 and the sum
of the taps rounds at every tap."""
PUZZLE = "quant.halo"
EXPECT = "Ask each einsum for float32 sums"


def conv_kernel(x_ref, w_ref, o_ref, *, stride=1):
    KH, KW = w_ref.shape[:2]
    block_h, Wo = o_ref.shape[:2]
    acc = jnp.zeros(o_ref.shape, x_ref.dtype)
    for kh in range(KH):
        for kw in range(KW):
            patch = x_ref[pl.ds(kh, block_h, stride=stride), pl.ds(kw, Wo, stride=stride), :]
            acc += jnp.einsum("hwc,cf->hwf", patch, w_ref[kh, kw])
    o_ref[...] = acc.astype(o_ref.dtype)
