"""pipelining.emit_pipeline: a shortcut: puzzle 3's hand-written double buffer, with no
pltpu.emit_pipeline at all (right values, right overlap, not the lesson)."""
PUZZLE = "pipelining.emit_pipeline"
EXPECT = "write no copy of your own"


def pipelined_sum_kernel(x_hbm, o_ref, total_vmem, *, chunk):
    def by_hand(chunks_vmem, sems):
        double_buffered_kernel(x_hbm, o_ref, chunks_vmem, sems, chunk=chunk)

    pl.run_scoped(by_hand, pltpu.VMEM((2, chunk, x_hbm.shape[1]), x_hbm.dtype),
                  pltpu.SemaphoreType.DMA((2,)))
