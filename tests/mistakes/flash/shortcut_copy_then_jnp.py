"""flash.grid (shortcut): a kernel copies q; the attention itself runs in jnp."""
PUZZLE = "flash.grid"
EXPECT = "happens outside your kernel"


def flash_grid(q, k, v, *, sm_scale=None, block_q=128, block_kv=128):
    def copy_kernel(q_ref, o_ref):
        o_ref[...] = q_ref[...]

    q = pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype))(q)
    return attention(q, k, v, sm_scale=sm_scale)
