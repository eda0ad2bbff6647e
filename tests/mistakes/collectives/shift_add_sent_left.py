"""collectives.shift_add: sends its shard to the left neighbour: every device adds its right neighbour's shard."""
PUZZLE = "collectives.shift_add"
EXPECT = "every device added its right neighbour"


def shift_add_kernel(x_ref, o_ref, x_vmem, arrived, send_sem, recv_sem, *, axis_name):
    left, right = neighbours(axis_name)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 1)
    sent = pltpu.async_remote_copy(x_ref, arrived, send_sem, recv_sem, device_id=(left,))
    pltpu.sync_copy(x_ref, x_vmem)
    sent.wait()
    x_vmem[...] = x_vmem[...] + arrived[...]
    pltpu.sync_copy(x_vmem, o_ref)
