"""quant.int4: the high nibble taken as the byte shifted right, unmasked: a byte >= 128
is a negative int8, and its high nibble comes out as u - 16."""
PUZZLE = "quant.int4"
EXPECT = "came out negative"


def int4_kernel(x_ref, packed_ref, scale_ref, zero_ref, o_ref, acc_ref, w_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    packed = packed_ref[...].astype(jnp.int32)
    low = packed & 0xF
    high = packed >> 4
    scale, zero = scale_ref[...], zero_ref[...]
    half = packed.shape[0]
    w_ref[pl.ds(0, half, stride=2), :] = (low.astype(jnp.float32) - zero) * scale
    w_ref[pl.ds(1, half, stride=2), :] = (high.astype(jnp.float32) - zero) * scale
    x = x_ref[...]
    acc_ref[...] += jnp.dot(x, w_ref[...].astype(x.dtype), preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)
