"""exact gelu (approximate=False) instead of the tanh default; should name exact vs tanh gelu."""
PUZZLE = "basics.bias_gelu"
EXPECT = 'Did you compute the exact GELU'


def bias_gelu_kernel(x_ref, b_ref, o_ref):
    x = x_ref[...].astype(jnp.float32) + b_ref[...].astype(jnp.float32)
    o_ref[...] = jax.nn.gelu(x, approximate=False).astype(o_ref.dtype)
