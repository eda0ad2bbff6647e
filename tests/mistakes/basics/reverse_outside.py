"""basics.reverse: reverses the blocks with JAX ops before an identity copy kernel."""
PUZZLE = "basics.reverse"
EXPECT = "here only the index maps may move them"


def reverse_blocks(x, *, bm=8):
    M, D = x.shape
    n = M // bm
    rows = pl.BlockSpec((bm, D), lambda i: (i, 0))
    return pl.pallas_call(
        copy_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(n,),
        in_specs=[rows],
        out_specs=rows,
    )(x.reshape(n, bm, D)[::-1].reshape(M, D))
