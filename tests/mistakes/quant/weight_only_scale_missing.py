"""quant.weight_only: the int8 block cast and multiplied, the column scale never applied."""
PUZZLE = "quant.weight_only"
EXPECT = "unscaled: multiply the finished sum by w_scale_ref"


def weight_only_kernel(x_ref, w_ref, w_scale_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    x = x_ref[...]
    acc_ref[...] += jnp.dot(x, w_ref[...].astype(x.dtype), preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)
