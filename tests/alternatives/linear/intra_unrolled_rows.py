"""linear.intra with the heads folded into the grid's first axis by a reshape around the
kernel ([B * N, T, H]: a reshape moves no element), and the mask with jnp.where on an
iota pair compared the other way round (row >= col)."""
PUZZLE = "linear.intra"


def intra_chunk_kernel(q_ref, k_ref, v_ref, o_ref):
    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    s = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32)
    i = jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
    j = jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
    s = jnp.where(i >= j, s, jnp.zeros_like(s))
    o_ref[...] = jnp.einsum("ij,jv->iv", s.astype(v.dtype), v,
                            preferred_element_type=jnp.float32).astype(o_ref.dtype)


def intra_chunk(q, k, v, *, chunk=64):
    B, N, T, H = q.shape
    Hv = v.shape[-1]
    if T % chunk:
        raise ValueError(f"intra_chunk: chunk={chunk} must divide T={T}")
    spec = lambda width: pl.BlockSpec((None, chunk, width), lambda h, c: (h, c, 0))
    out = pl.pallas_call(
        intra_chunk_kernel,
        out_shape=jax.ShapeDtypeStruct((B * N, T, Hv), q.dtype),
        grid=(B * N, T // chunk),
        in_specs=[spec(H), spec(H), spec(Hv)],
        out_specs=spec(Hv),
    )(q.reshape(B * N, T, H), k.reshape(B * N, T, H), v.reshape(B * N, T, Hv))
    return out.reshape(B, N, T, Hv)
