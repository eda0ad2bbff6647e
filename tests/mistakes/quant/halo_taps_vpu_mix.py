"""halo conv: each tap's channel contraction is done on the VPU (broadcast multiply,
sum over C) in float32; the per-tap MXU einsum runs as a decoy mixed in at 1%. Dodges
'one matmul per tap, over the whole tile'."""
PUZZLE = "quant.halo"
EXPECT = "in a pattern that is a matrix product"


def conv_kernel(x_ref, w_ref, o_ref, *, stride=1):
    KH, KW = w_ref.shape[:2]
    block_h, Wo = o_ref.shape[:2]
    acc = jnp.zeros(o_ref.shape, jnp.float32)
    for kh in range(KH):
        for kw in range(KW):
            patch = x_ref[pl.ds(kh, block_h, stride=stride), pl.ds(kw, Wo, stride=stride), :]
            wt = w_ref[kh, kw]
            vpu = jnp.sum(patch.astype(jnp.float32)[:, :, :, None]
                          * wt.astype(jnp.float32)[None, None, :, :], axis=2)
            mxu = jnp.einsum("hwc,cf->hwf", patch, wt, preferred_element_type=jnp.float32)
            acc += 0.99 * vpu + 0.01 * mxu
    o_ref[...] = acc.astype(o_ref.dtype)
