"""pipelining.emit_pipeline: a pipeline of one step over all of x (no chunks)."""
PUZZLE = "pipelining.emit_pipeline"
EXPECT = "one chunk per step"


def pipelined_sum_kernel(x_hbm, o_ref, total_vmem, *, chunk):
    total_vmem[...] = jnp.zeros_like(total_vmem)

    def add_chunk(x_vmem):
        total_vmem[...] += jnp.sum(x_vmem[...], axis=0, keepdims=True)

    pltpu.emit_pipeline(add_chunk, grid=(1,),
                        in_specs=[pl.BlockSpec(x_hbm.shape, lambda i: (0, 0))])(x_hbm)
    o_ref[...] = total_vmem[...]
