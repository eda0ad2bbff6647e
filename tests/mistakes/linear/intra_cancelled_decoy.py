"""linear.intra (shortcut): the chunk computed token by token inside the kernel, the
two chunk matmuls executed as decoys, added to the result and subtracted again, so that
their values reach the store and cancel: (out + decoy) - decoy."""
PUZZLE = "linear.intra"
EXPECT = "compute results that never reach an output"


def intra_chunk_kernel(q_ref, k_ref, v_ref, o_ref):
    q = q_ref[...].astype(jnp.float32)
    k = k_ref[...].astype(jnp.float32)
    v = v_ref[...].astype(jnp.float32)
    C, H = q.shape
    Hv = v.shape[1]
    rows = jax.lax.broadcasted_iota(jnp.int32, (C, 1), 0)

    def step(t, carry):
        state, out = carry
        kt = jnp.sum(jnp.where(rows == t, k, 0.0), axis=0)      # (H,)
        vt = jnp.sum(jnp.where(rows == t, v, 0.0), axis=0)      # (Hv,)
        qt = jnp.sum(jnp.where(rows == t, q, 0.0), axis=0)
        state = state + kt[:, None] * vt[None, :]
        ot = jnp.sum(qt[:, None] * state, axis=0)               # (Hv,)
        out = jnp.where(rows == t, ot[None, :], out)
        return state, out

    _, out = jax.lax.fori_loop(0, C, step, (jnp.zeros((H, Hv), jnp.float32),
                                            jnp.zeros((C, Hv), jnp.float32)))
    scores = jnp.einsum("ih,jh->ij", q_ref[...], k_ref[...], preferred_element_type=jnp.float32)
    decoy = jnp.dot(scores.astype(v_ref.dtype), v_ref[...], preferred_element_type=jnp.float32)
    o_ref[...] = ((out + decoy) - decoy).astype(o_ref.dtype)
