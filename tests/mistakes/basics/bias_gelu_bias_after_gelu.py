"""basics.bias_gelu: the bias is added after the GELU, gelu(x) + b."""
PUZZLE = "basics.bias_gelu"
EXPECT = "the bias was added after the GELU"

def bias_gelu_kernel(x_ref, b_ref, o_ref):
    x = jax.nn.gelu(x_ref[...].astype(jnp.float32)) + b_ref[...].astype(jnp.float32)
    o_ref[...] = x.astype(o_ref.dtype)

