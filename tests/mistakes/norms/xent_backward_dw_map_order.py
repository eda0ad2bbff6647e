"""norms.xent_backward: the dw kernel's per-token index map names its arguments (t, v),
the dh kernel's order, though the dw grid is (v, t): labels are read at token block v.
The diagnosis points at this index map, not at the dh kernel's identical-looking one."""
PUZZLE = "norms.xent_backward"
EXPECT = "lambda t, v: (t, 0))   # grid is (v, t)"


def cross_entropy_backward(h, w, labels, lse, dloss, *, block_t=128, block_v=512):
    (T, D), V = h.shape, w.shape[1]
    labels, dloss = labels.reshape(T, 1), dloss.reshape(T, 1).astype(jnp.float32)
    num_t, num_v = pl.cdiv(T, block_t), pl.cdiv(V, block_v)

    # dh: a token block sums over the vocabulary blocks, grid (t, v).
    per_token = pl.BlockSpec((block_t, 1), lambda t, v: (t, 0))
    tokens = pl.BlockSpec((block_t, D), lambda t, v: (t, 0))
    dh = pl.pallas_call(
        functools.partial(cross_entropy_dh_kernel, V=V),
        out_shape=jax.ShapeDtypeStruct(h.shape, h.dtype),
        grid=(num_t, num_v),
        in_specs=[tokens, pl.BlockSpec((D, block_v), lambda t, v: (0, v)), per_token,
                  per_token, per_token],
        out_specs=tokens,
        scratch_shapes=[pltpu.VMEM((block_t, D), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(h, w, labels, lse, dloss)

    # dw: a vocabulary block sums over the token blocks, grid (v, t).
    per_token = pl.BlockSpec((block_t, 1), lambda t, v: (t, 0))   # grid is (v, t)
    vocabulary = pl.BlockSpec((D, block_v), lambda v, t: (0, v))
    dw = pl.pallas_call(
        functools.partial(cross_entropy_dw_kernel, T=T),
        out_shape=jax.ShapeDtypeStruct(w.shape, w.dtype),
        grid=(num_v, num_t),
        in_specs=[pl.BlockSpec((block_t, D), lambda v, t: (t, 0)), vocabulary, per_token,
                  per_token, per_token],
        out_specs=vocabulary,
        scratch_shapes=[pltpu.VMEM((D, block_v), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(h, w, labels, lse, dloss)
    return dh, dw
