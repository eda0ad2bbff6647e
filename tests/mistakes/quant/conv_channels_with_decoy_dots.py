"""quant.halo: a shortcut. The taps are summed channel by channel with elementwise
products (no matmul), and the per-tap matmuls are computed beside them only to be
counted: their results are multiplied by zero."""
PUZZLE = "quant.halo"
EXPECT = "compute results that never reach an output"


def conv_kernel(x_ref, w_ref, o_ref, *, stride=1):
    KH, KW = w_ref.shape[:2]
    block_h, Wo = o_ref.shape[:2]
    acc = jnp.zeros(o_ref.shape, jnp.float32)
    decoy = jnp.zeros(o_ref.shape, jnp.float32)
    for kh in range(KH):
        for kw in range(KW):
            patch = x_ref[pl.ds(kh, block_h, stride=stride), pl.ds(kw, Wo, stride=stride), :]
            taps = w_ref[kh, kw].astype(jnp.float32)
            for c in range(patch.shape[-1]):
                acc += patch[:, :, c:c + 1].astype(jnp.float32) * taps[c]
            decoy += jnp.einsum("hwc,cf->hwf", patch, w_ref[kh, kw],
                                preferred_element_type=jnp.float32)
    o_ref[...] = (acc + 0.0 * decoy).astype(o_ref.dtype)
