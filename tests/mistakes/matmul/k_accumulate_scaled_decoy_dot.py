"""A shortcut: every (bm, bk) x (bk, bn) block product is done on the vector unit (broadcast
multiply, sum over k, float32); the MXU dot of the block runs on a scaled by 2^-60 and is
added to the accumulator (used, rounded away)."""
PUZZLE = "matmul.k_accumulate"
EXPECT = 'do not move the output'


def mm(a, b):
    """a (m, k) @ b (k, n) on the vector unit in float32 (broadcast multiply, sum), plus the
    MXU dot of the same shapes on a scaled by 2^-60 (used, rounded away)."""
    vpu = jnp.sum(a.astype(jnp.float32)[:, :, None] * b.astype(jnp.float32)[None, :, :],
                  axis=1)
    return vpu + jnp.dot(a * (2.0 ** -60), b, preferred_element_type=jnp.float32)


def matmul_kernel(a_ref, b_ref, o_ref, acc_ref, *, k_axis=2):
    k = pl.program_id(k_axis)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += mm(a_ref[...], b_ref[...])

    @pl.when(k == pl.num_programs(k_axis) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)
