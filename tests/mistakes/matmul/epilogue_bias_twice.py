"""matmul.epilogue: the bias starts acc_ref at k == 0 and is added again in the epilogue (on a 2-step K the same output as a bias added at every step: both are offered)."""
PUZZLE = "matmul.epilogue"
EXPECT = "the bias counts twice"

def matmul_bias_gelu_kernel(a_ref, b_ref, bias_ref, o_ref, acc_ref):
    k = pl.program_id(2)
    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.broadcast_to(bias_ref[...].astype(jnp.float32), acc_ref.shape)
    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
    @pl.when(k == pl.num_programs(2) - 1)
    def epilogue():
        y = acc_ref[...] + bias_ref[...].astype(jnp.float32)
        o_ref[...] = jax.nn.gelu(y).astype(o_ref.dtype)

