"""pipelined_sum_kernel: inner grid (chunk,) with blocks of (S // chunk, D): the number of blocks and the block length swapped."""
PUZZLE = "pipelining.emit_pipeline"
EXPECT = "more copies than there are chunks"


def pipelined_sum_kernel(x_hbm, o_ref, total_vmem, *, chunk):
    total_vmem[...] = jnp.zeros_like(total_vmem)

    def add_chunk(x_vmem):   # one (chunk, D) block, already in VMEM
        total_vmem[...] += jnp.sum(x_vmem[...].astype(jnp.float32), axis=0, keepdims=True)

    pltpu.emit_pipeline(
        add_chunk,
        grid=(chunk,),
        in_specs=[pl.BlockSpec((x_hbm.shape[0] // chunk, x_hbm.shape[1]), lambda i: (i, 0))],
    )(x_hbm)
    o_ref[...] = total_vmem[...].astype(o_ref.dtype)
