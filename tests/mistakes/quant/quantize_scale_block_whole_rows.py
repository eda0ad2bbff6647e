"""quant.quantize: the scale's output BlockSpec takes x's (block_rows, C) blocks: the
(block_rows, 1) scale is stored into a (block_rows, C) ref."""
PUZZLE = "quant.quantize"
EXPECT = "this output's BlockSpec block shape (out_specs)"


def quantize_int8(x, *, block_rows=32):
    _check_array("quantize_int8", "x", x, 2, [jnp.floating], "a float [R, C] array")
    _check_block("quantize_int8", "block_rows", block_rows, 8)
    R, C = x.shape
    rows = pl.BlockSpec((block_rows, C), lambda i: (i, 0))   # whole rows: a row's max needs all of it
    return pl.pallas_call(
        quantize_kernel,
        out_shape=(jax.ShapeDtypeStruct((R, C), jnp.int8),
                   jax.ShapeDtypeStruct((R, 1), jnp.float32)),
        grid=(pl.cdiv(R, block_rows),),
        in_specs=[rows],
        out_specs=(rows, rows),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x)
