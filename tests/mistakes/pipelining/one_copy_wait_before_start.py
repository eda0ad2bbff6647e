"""pipelining.one_copy: waits for the copy before starting it (a TPU would hang)."""
PUZZLE = "pipelining.one_copy"
EXPECT = "Call copy.start() first, then copy.wait()"


def add_one_kernel(x_hbm, o_ref, x_vmem, sem):
    copy = pltpu.make_async_copy(x_hbm, x_vmem, sem)
    copy.wait()
    copy.start()
    o_ref[...] = x_vmem[...] + 1
