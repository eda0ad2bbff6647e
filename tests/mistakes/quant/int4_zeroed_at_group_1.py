"""quant.int4: the accumulator is zeroed at the second group, after the first was added."""
PUZZLE = "quant.int4"
EXPECT = "your sums hold every group's product but the first"


def int4_kernel(x_ref, packed_ref, scale_ref, zero_ref, o_ref, acc_ref, w_ref):
    k = pl.program_id(2)   # one group of K rows per step

    @pl.when(k == 1)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    packed = packed_ref[...].astype(jnp.int32)            # (group_size // 2, bn)
    low = packed & 0xF                                     # rows 0, 2, 4, ... of the group
    high = jax.lax.shift_right_logical(packed, 4) & 0xF   # rows 1, 3, 5, ...
    scale, zero = scale_ref[...], zero_ref[...]            # (1, bn): this group's
    half = packed.shape[0]
    # Interleave in VMEM: low nibbles to the even rows, high nibbles to the odd rows.
    w_ref[pl.ds(0, half, stride=2), :] = (low.astype(jnp.float32) - zero) * scale
    w_ref[pl.ds(1, half, stride=2), :] = (high.astype(jnp.float32) - zero) * scale
    x = x_ref[...]
    acc_ref[...] += jnp.dot(x, w_ref[...].astype(x.dtype), preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


