"""mixed precision: every product is done on the VPU in float32 (bf16 blocks cast up,
broadcast multiply, sum over bk); the only MXU dot is a tiny (8, bk) x (bk, bn) decoy on
the tile's first 8 rows, whose result replaces those rows (it is right, so the values
are). This puzzle counts no flops: one dot that moves the output suffices. Dodges 'bf16
operands on the MXU, f32 accumulate' (the work is float32 VPU work)."""
PUZZLE = "matmul.mixed_precision"
EXPECT = "in a pattern that is a matrix product"


def matmul_kernel(a_ref, b_ref, o_ref, acc_ref, *, k_axis=2):
    k = pl.program_id(k_axis)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    a = a_ref[...].astype(jnp.float32)
    b = b_ref[...].astype(jnp.float32)
    vpu = jnp.sum(a[:, :, None] * b[None, :, :], axis=1)
    top = jnp.dot(a_ref[:8, :], b_ref[...], preferred_element_type=jnp.float32)
    rows = jax.lax.broadcasted_iota(jnp.int32, vpu.shape, 0)
    vpu = jnp.where(rows < 8, jnp.pad(top, ((0, vpu.shape[0] - 8), (0, 0))), vpu)
    acc_ref[...] += vpu

    @pl.when(k == pl.num_programs(k_axis) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)
