"""collectives.shift_add: reads the buffer the left neighbour's copy lands in without waiting for it."""
PUZZLE = "collectives.shift_add"
EXPECT = "which never waits for it"


def shift_add_kernel(x_ref, o_ref, x_vmem, arrived, send_sem, recv_sem, *, axis_name):
    left, right = neighbours(axis_name)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)
    sent = pltpu.async_remote_copy(x_ref, arrived, send_sem, recv_sem, device_id=(right,))
    pltpu.sync_copy(x_ref, x_vmem)

    x_vmem[...] = x_vmem[...] + arrived[...]
    pltpu.sync_copy(x_vmem, o_ref)
