"""quant.dequant: K not padded: the grid covers cdiv(K, bk) steps and the last K block
hangs past the end of K, garbage (int8 has no NaN to show it)."""
PUZZLE = "quant.dequant"
EXPECT = 'are not padded: the last K block'


def int8_matmul(a_q, a_scale, b_q, b_scale, *, bm=128, bk=128, bn=128):
    name = "int8_matmul"
    _check_array(name, "a_q", a_q, 2, [jnp.int8], "int8 [M, K]")
    _check_array(name, "b_q", b_q, 2, [jnp.int8], "int8 [K, N]")
    (M, K), N = a_q.shape, b_q.shape[1]
    _check_shape(name, "b_q", b_q, (K, N), "int8 [K, N] with a_q's K")
    _check_array(name, "a_scale", a_scale, 2, [jnp.float32], "float32 [M, 1]")
    _check_shape(name, "a_scale", a_scale, (M, 1), "float32 [M, 1]")
    _check_array(name, "b_scale", b_scale, 2, [jnp.float32], "float32 [1, N]")
    _check_shape(name, "b_scale", b_scale, (1, N), "float32 [1, N]")
    _check_block(name, "bm", bm, 32)          # int8 rows: 32 to a vreg tile
    _check_block(name, "bk", bk, 128)
    _check_block(name, "bn", bn, 128)
    # A block as big as its dim is always legal; past the end of K a block would hold
    # garbage, so K is padded with zeros (they add nothing to a dot product).
    bm, bk, bn = min(bm, M), min(bk, K), min(bn, N)
    pad = -K % bk
    return pl.pallas_call(
        int8_dequant_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), jnp.float32),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), (K + pad) // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bm, 1), lambda i, j, k: (i, 0)),    # the rows' scales
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
                  pl.BlockSpec((1, bn), lambda i, j, k: (0, j))],   # the columns' scales
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.int32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a_q, a_scale, b_q, b_scale)
