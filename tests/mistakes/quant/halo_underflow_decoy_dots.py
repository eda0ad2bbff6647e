"""quant.halo: every tap's (h, w, c) x (c, f) product is done on the vector unit in
float32 (broadcast multiply, sum over c); each tap's MXU einsum runs on the patch scaled
by 2^-100 twice, which underflows to zero, and is added in: a dot whose every result is 0."""
PUZZLE = "quant.halo"
EXPECT = "do not move the output"


def conv_kernel(x_ref, w_ref, o_ref, *, stride=1):
    KH, KW = w_ref.shape[:2]
    block_h, Wo = o_ref.shape[:2]
    acc = jnp.zeros(o_ref.shape, jnp.float32)
    for kh in range(KH):
        for kw in range(KW):
            patch = x_ref[pl.ds(kh, block_h, stride=stride), pl.ds(kw, Wo, stride=stride), :]
            tap = w_ref[kh, kw]
            acc += jnp.sum(patch.astype(jnp.float32)[:, :, :, None]
                           * tap.astype(jnp.float32)[None, None, :, :], axis=2)
            acc += jnp.einsum("hwc,cf->hwf", patch * (2.0 ** -100) * (2.0 ** -100), tap,
                              preferred_element_type=jnp.float32)
    o_ref[...] = acc.astype(o_ref.dtype)
