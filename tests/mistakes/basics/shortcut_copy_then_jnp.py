"""basics.add_one (shortcut): a kernel that only copies x, with the + 1 done in jnp."""
PUZZLE = "basics.add_one"
EXPECT = "An addition happens outside your kernel"


def add_one(x):
    copied = pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    return copied + 1
