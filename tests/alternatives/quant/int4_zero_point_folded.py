"""quant.int4 with the zero point folded out of the weights, as AWQ-style kernels do:
x @ ((u - z) s) = x @ (u s) - rowsum(x) (z s), so the unpacked group holds u * s and the
zero's share is one row sum of x per step."""
PUZZLE = "quant.int4"


def int4_kernel(x_ref, packed_ref, scale_ref, zero_ref, o_ref, acc_ref, w_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    packed = packed_ref[...].astype(jnp.int32)
    low = (packed & 0xF).astype(jnp.float32)
    high = (jax.lax.shift_right_logical(packed, 4) & 0xF).astype(jnp.float32)
    scale, zero = scale_ref[...], zero_ref[...]
    half = packed.shape[0]
    w_ref[pl.ds(0, half, stride=2), :] = low * scale
    w_ref[pl.ds(1, half, stride=2), :] = high * scale
    x = x_ref[...]
    rowsum = jnp.sum(x.astype(jnp.float32), axis=1, keepdims=True)
    acc_ref[...] += (jnp.dot(x, w_ref[...].astype(x.dtype), preferred_element_type=jnp.float32)
                     - rowsum * (zero * scale))

    @pl.when(k == pl.num_programs(2) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)
