"""k_accumulate: the tile's product built as bk rank-1 updates (a column of a times a row
of b) in a fori_loop on the vector units, with the MXU's dot kept for one row. The
products are the MXU's work, done one multiply at a time."""
PUZZLE = "matmul.k_accumulate"
EXPECT = "in a pattern that is a matrix product"


def matmul_kernel(a_ref, b_ref, o_ref, acc_ref, *, k_axis=2):
    k = pl.program_id(k_axis)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    def rank1(kk, acc):
        column = a_ref[:, pl.ds(kk, 1)].astype(jnp.float32)
        row = b_ref[pl.ds(kk, 1), :].astype(jnp.float32)
        return acc + column * row

    vpu = jax.lax.fori_loop(0, a_ref.shape[1], rank1, jnp.zeros(acc_ref.shape, jnp.float32))
    mxu = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
    first = jax.lax.broadcasted_iota(jnp.int32, vpu.shape, 0) == 0
    acc_ref[...] += jnp.where(first, mxu, vpu)

    @pl.when(k == pl.num_programs(k_axis) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)
