"""pipelining.emit_pipeline: adds into total_vmem without zeroing it first."""
PUZZLE = "pipelining.emit_pipeline"
EXPECT = "zeroed before the pipeline runs"


def pipelined_sum_kernel(x_hbm, o_ref, total_vmem, *, chunk):
    def add_chunk(x_vmem):
        total_vmem[...] += jnp.sum(x_vmem[...], axis=0, keepdims=True)

    pltpu.emit_pipeline(add_chunk, grid=(x_hbm.shape[0] // chunk,),
                        in_specs=[pl.BlockSpec((chunk, x_hbm.shape[1]), lambda i: (i, 0))],
                        )(x_hbm)
    o_ref[...] = total_vmem[...]
