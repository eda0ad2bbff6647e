"""matmul.epilogue: the bias is added after the GELU, gelu(a @ b) + bias."""
PUZZLE = "matmul.epilogue"
EXPECT = "the bias was added after the GELU"

def matmul_bias_gelu_kernel(a_ref, b_ref, bias_ref, o_ref, acc_ref):
    k = pl.program_id(2)
    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)
    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
    @pl.when(k == pl.num_programs(2) - 1)
    def epilogue():
        y = jax.nn.gelu(acc_ref[...]) + bias_ref[...].astype(jnp.float32)
        o_ref[...] = y.astype(o_ref.dtype)

