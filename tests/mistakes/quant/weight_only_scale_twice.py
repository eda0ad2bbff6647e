"""quant.weight_only: each step's product is scaled, and the finished sum is scaled again."""
PUZZLE = "quant.weight_only"
EXPECT = "times w_scale squared"


def weight_only_kernel(x_ref, w_ref, w_scale_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    x = x_ref[...]
    w = w_ref[...].astype(x.dtype)   # int8 -> x's dtype, in VMEM: exact (|w| <= 127)
    acc_ref[...] += jnp.dot(x, w * 1, preferred_element_type=jnp.float32) * w_scale_ref[...]

    @pl.when(k == pl.num_programs(2) - 1)
    def dequantize():   # a column's scale factors out of its sum over K: apply it once
        o_ref[...] = (acc_ref[...] * w_scale_ref[...]).astype(o_ref.dtype)


