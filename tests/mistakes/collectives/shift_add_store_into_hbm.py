"""collectives.shift_add: stores the sum straight into o_ref, which a pl.kernel leaves in
HBM: only a copy reaches it."""
PUZZLE = "collectives.shift_add"
EXPECT = "stores into a ref that stays in HBM"


def shift_add_kernel(x_ref, o_ref, x_vmem, arrived, send_sem, recv_sem, *, axis_name):
    left, right = neighbours(axis_name)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)
    sent = pltpu.async_remote_copy(x_ref, arrived, send_sem, recv_sem, device_id=(right,))
    pltpu.sync_copy(x_ref, x_vmem)
    sent.wait()
    o_ref[...] = x_vmem[...] + arrived[...]
