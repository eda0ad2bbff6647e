"""linear.chunked (shortcut): a kernel copies q; the linear attention itself runs in jnp."""
PUZZLE = "linear.chunked"
EXPECT = "happens outside your kernel"


def chunked_call(q, k, v, *per_token, kernel, chunk=64):
    def copy_kernel(q_ref, o_ref):
        o_ref[...] = q_ref[...]

    q = pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype))(q)
    return recurrent(q, k, v)
