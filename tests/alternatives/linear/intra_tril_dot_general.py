"""linear.intra with blocks of (1, 1, chunk, H) indexed [0, 0] in the kernel, the causal
mask as jnp.tril of the scores, and both products as lax.dot_general."""
PUZZLE = "linear.intra"

QK = (((1,), (1,)), ((), ()))
SV = (((1,), (0,)), ((), ()))


def intra_chunk_kernel(q_ref, k_ref, v_ref, o_ref):
    q, k, v = q_ref[0, 0], k_ref[0, 0], v_ref[0, 0]
    scores = jnp.tril(jax.lax.dot_general(q, k, QK, preferred_element_type=jnp.float32))
    o_ref[0, 0] = jax.lax.dot_general(scores.astype(v.dtype), v, SV,
                                      preferred_element_type=jnp.float32).astype(o_ref.dtype)


def intra_chunk(q, k, v, *, chunk=64):
    B, N, T, H = q.shape
    Hv = v.shape[-1]
    if T % chunk:
        raise ValueError(f"intra_chunk: chunk={chunk} must divide T={T}")
    index = lambda b, n, c: (b, n, c, 0)
    return pl.pallas_call(
        intra_chunk_kernel,
        out_shape=jax.ShapeDtypeStruct((B, N, T, Hv), q.dtype),
        grid=(B, N, T // chunk),
        in_specs=[pl.BlockSpec((1, 1, chunk, H), index), pl.BlockSpec((1, 1, chunk, H), index),
                  pl.BlockSpec((1, 1, chunk, Hv), index)],
        out_specs=pl.BlockSpec((1, 1, chunk, Hv), index),
    )(q, k, v)
