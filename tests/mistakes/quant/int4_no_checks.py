"""quant.int4: no argument checks: wrong shapes fail later, inside JAX, or not at all."""
PUZZLE = "quant.int4"
EXPECT = "raise ValueError with the argument's name"


def int4_matmul(x, w_packed, scales, zeros, *, group_size=128, bm=128, bn=128):
    (M, K), N = x.shape, w_packed.shape[1]
    groups = K // group_size
    bm, bn = min(bm, M), min(bn, N)
    # One group per K step. A (1, bn) block of a [groups, N] array breaks the (8, 128)
    # rule, so the scales and zeros travel as [groups, 1, N]: (1, bn) blocks of whole dims.
    group_row = pl.BlockSpec((None, 1, bn), lambda i, j, k: (k, 0, j))
    return pl.pallas_call(
        int4_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), x.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), groups),
        in_specs=[pl.BlockSpec((bm, group_size), lambda i, j, k: (i, k)),
                  pl.BlockSpec((group_size // 2, bn), lambda i, j, k: (k, j)),  # packed bytes
                  group_row, group_row],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32),            # the running sum
                        pltpu.VMEM((group_size, bn), jnp.float32)],   # one group, unpacked
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, w_packed, scales.reshape(groups, 1, N), zeros.reshape(groups, 1, N))
