"""pipelining.one_copy: starts the copy and reads the buffer without waiting for it."""
PUZZLE = "pipelining.one_copy"
EXPECT = "starts the copy but never waits for it"


def add_one_kernel(x_hbm, o_ref, x_vmem, sem):
    pltpu.make_async_copy(x_hbm, x_vmem, sem).start()
    o_ref[...] = x_vmem[...] + 1
