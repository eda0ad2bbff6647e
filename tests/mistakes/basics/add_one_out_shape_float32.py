"""basics.add_one: out_shape hard-codes float32, so the bf16 case stores bf16 into f32."""
PUZZLE = "basics.add_one"
EXPECT = "not a fixed float32"


def add_one(x):
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32),
    )(x)
