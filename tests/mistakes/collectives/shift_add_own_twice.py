"""collectives.shift_add: adds its own copy of x to itself instead of the buffer the neighbour's copy landed in."""
PUZZLE = "collectives.shift_add"
EXPECT = "added its own shard to itself"


def shift_add_kernel(x_ref, o_ref, x_vmem, arrived, send_sem, recv_sem, *, axis_name):
    left, right = neighbours(axis_name)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)
    sent = pltpu.async_remote_copy(x_ref, arrived, send_sem, recv_sem, device_id=(right,))
    pltpu.sync_copy(x_ref, x_vmem)
    sent.wait()
    x_vmem[...] = x_vmem[...] + x_vmem[...]
    pltpu.sync_copy(x_vmem, o_ref)
