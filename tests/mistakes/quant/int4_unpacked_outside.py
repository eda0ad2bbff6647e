"""quant.int4: the nibbles unpacked in JAX into an int8 [K, N] array (twice the bytes, in
HBM), and the kernel only dequantises and multiplies."""
PUZZLE = "quant.int4"
EXPECT = "the 4-bit weights were unpacked outside the kernel"


def int4_matmul(x, w_packed, scales, zeros, *, group_size=128, bm=128, bn=128):
    (M, K), N = x.shape, w_packed.shape[1]
    groups = K // group_size
    bytes_ = w_packed.astype(jnp.int32)
    u = jnp.stack([bytes_ & 0xF, (bytes_ >> 4) & 0xF], axis=1).reshape(K, N).astype(jnp.int8)
    bm, bn = min(bm, M), min(bn, N)

    def kernel(x_ref, u_ref, scale_ref, zero_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def start_tile():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        w = (u_ref[...].astype(jnp.float32) - zero_ref[...]) * scale_ref[...]
        x_blk = x_ref[...]
        acc_ref[...] += jnp.dot(x_blk, w.astype(x_blk.dtype), preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def finish_tile():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    group_row = pl.BlockSpec((None, 1, bn), lambda i, j, k: (k, 0, j))
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), x.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), groups),
        in_specs=[pl.BlockSpec((bm, group_size), lambda i, j, k: (i, k)),
                  pl.BlockSpec((group_size, bn), lambda i, j, k: (k, j)),
                  group_row, group_row],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, u, scales.reshape(groups, 1, N), zeros.reshape(groups, 1, N))
