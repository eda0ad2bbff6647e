"""pipelining.one_copy (shortcut): x through a BlockSpec, as in basics: no copy by hand."""
PUZZLE = "pipelining.one_copy"
EXPECT = "a BlockSpec that copies it for you"


def add_one(x):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
