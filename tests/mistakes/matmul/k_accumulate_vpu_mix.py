"""k_accumulate: the (bm, bk) x (bk, bn) product is done on the VPU in float32 and the
MXU dot (the counted flops) is mixed in at a 1e-4 share. Dodges 'the MXU does the tile's
product at every K step'."""
PUZZLE = "matmul.k_accumulate"
EXPECT = "in a pattern that is a matrix product"


def matmul_kernel(a_ref, b_ref, o_ref, acc_ref, *, k_axis=2):
    k = pl.program_id(k_axis)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    a = a_ref[...].astype(jnp.float32)
    b = b_ref[...].astype(jnp.float32)
    vpu = jnp.sum(a[:, :, None] * b[None, :, :], axis=1)
    mxu = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
    row0 = jax.lax.broadcasted_iota(jnp.int32, vpu.shape, 0) == 0
    acc_ref[...] += jnp.where(row0, mxu, vpu)

    @pl.when(k == pl.num_programs(k_axis) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)
