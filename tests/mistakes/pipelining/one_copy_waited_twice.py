"""pipelining.one_copy: waits twice for its one copy; the second wait has nothing left
to take and would hang on a TPU."""
PUZZLE = "pipelining.one_copy"
EXPECT = "an earlier .wait() (the line under 'waited') already took"


def add_one_kernel(x_hbm, o_ref, x_vmem, sem):
    copy = pltpu.make_async_copy(x_hbm, x_vmem, sem)
    copy.start()
    copy.wait()
    copy.wait()
    o_ref[...] = x_vmem[...] + 1
