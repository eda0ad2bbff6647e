"""splash.skip_empty (shortcut): a kernel copies q; masked attention runs in jnp."""
PUZZLE = "splash.skip_empty"
EXPECT = "happens outside your kernel"


def flash_block_mask(q, k, v, mask, *, sm_scale=None, block_q=128, block_kv=128):
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale

    def copy_kernel(q_ref, o_ref):
        o_ref[...] = q_ref[...]

    q = pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype))(q)
    s = jnp.einsum("bnth,bnsh->bnts", q, k, preferred_element_type=jnp.float32) * scale
    p = jax.nn.softmax(jnp.where(np.asarray(mask), s, -jnp.inf), axis=-1)
    return jnp.einsum("bnts,bnsh->bnth", p, v.astype(jnp.float32)).astype(q.dtype)
