"""basics.bias_gelu: adds the bias with a JAX op before the kernel, so x + b makes
an extra trip through HBM."""
PUZZLE = "basics.bias_gelu"
EXPECT = "add the bias and do the casts inside bias_gelu_kernel"


def bias_gelu(x, b, *, bm=8):
    M, D = x.shape
    rows = pl.BlockSpec((bm, D), lambda i: (i, 0))
    return pl.pallas_call(
        bias_gelu_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(M, bm),),
        in_specs=[rows, pl.BlockSpec((1, D), lambda i: (0, 0))],
        out_specs=rows,
    )(x + b, jnp.zeros((1, D), x.dtype))
