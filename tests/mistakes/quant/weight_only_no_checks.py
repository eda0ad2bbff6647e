"""quant.weight_only: no argument checks: a float32 w_q reaches the kernel (and fails inside JAX)."""
PUZZLE = "quant.weight_only"
EXPECT = "raise ValueError with the argument's name"


def int8_weight_matmul(x, w_q, w_scale, *, bm=128, bk=128, bn=128):
    (M, K), N = x.shape, w_q.shape[1]
    bm, bk, bn = min(bm, M), min(bk, K), min(bn, N)
    pad = -K % bk
    x = jnp.pad(x, ((0, 0), (0, pad)))
    w_q = jnp.pad(w_q, ((0, pad), (0, 0)))    # int8 zeros: still int8 in HBM
    return pl.pallas_call(
        weight_only_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), x.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), (K + pad) // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),    # int8 over HBM
                  pl.BlockSpec((1, bn), lambda i, j, k: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, w_q, w_scale)
