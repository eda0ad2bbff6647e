"""basics.add_one (shortcut): runs the right kernel, then returns a jnp result instead."""
PUZZLE = "basics.add_one"
EXPECT = "is never used"


def add_one(x):
    pl.pallas_call(add_one_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    return x + 1
