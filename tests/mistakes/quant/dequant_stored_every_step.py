"""quant.dequant: the int32 sum scaled and stored at every k step, not once at the last:
the values agree (the last store wins), the multiplies before it are thrown away."""
PUZZLE = "quant.dequant"
EXPECT = "the scales are multiplied in at every k step, outside the pl.when"


def int8_dequant_kernel(a_ref, a_scale_ref, b_ref, b_scale_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.int32)
    o_ref[...] = acc_ref[...].astype(jnp.float32) * a_scale_ref[...] * b_scale_ref[...]
