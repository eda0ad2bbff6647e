"""quant.weight_only: the int8 block cast to float32 whatever x's dtype: with a bf16 x the
dot multiplies bf16 by float32 (a float32 matmul on the MXU). The values agree."""
PUZZLE = "quant.weight_only"
EXPECT = "the dot multiplies bfloat16 by float32 where x is bfloat16"


def weight_only_kernel(x_ref, w_ref, w_scale_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    w = w_ref[...].astype(jnp.float32)
    acc_ref[...] += jnp.dot(x_ref[...], w, preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def dequantize():
        o_ref[...] = (acc_ref[...] * w_scale_ref[...]).astype(o_ref.dtype)
