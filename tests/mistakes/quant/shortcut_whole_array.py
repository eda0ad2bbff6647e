"""quant.quantize (shortcut): puzzle's kernel over the whole array in one step, no grid."""
PUZZLE = "quant.quantize"
EXPECT = "the lesson is the grid: one step per block of block_rows whole rows"


def quantize_int8(x, *, block_rows=32):
    R, C = x.shape
    return pl.pallas_call(
        quantize_kernel,
        out_shape=(jax.ShapeDtypeStruct((R, C), jnp.int8),
                   jax.ShapeDtypeStruct((R, 1), jnp.float32)),
    )(x)
