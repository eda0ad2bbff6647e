"""A shortcut: each block product a_blk @ b_blk is computed on the vector unit (broadcast
multiply, sum over k, float32); the MXU then multiplies that product by an identity
matrix made with iota (bk == bn here), at Precision.HIGHEST, and the result is what is
accumulated. The dot has the lesson's shape and flops and its result is the output, all of
it, but the MXU only passes the VPU's answer through."""
PUZZLE = "matmul.k_accumulate"
EXPECT = 'builds from no input'


def matmul_kernel(a_ref, b_ref, o_ref, acc_ref, *, k_axis=2):
    k = pl.program_id(k_axis)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    a, b = a_ref[...].astype(jnp.float32), b_ref[...].astype(jnp.float32)
    product = jnp.sum(a[:, :, None] * b[None, :, :], axis=1)          # (bm, bn)
    product = jnp.where(product == product, product, 0.0)   # garbage columns: 0 * NaN
    bk, bn = b.shape
    eye = (jax.lax.broadcasted_iota(jnp.int32, (bk, bn), 0)
           == jax.lax.broadcasted_iota(jnp.int32, (bk, bn), 1)).astype(jnp.float32)
    acc_ref[...] += jnp.dot(product, eye, precision=jax.lax.Precision.HIGHEST,
                            preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(k_axis) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)
