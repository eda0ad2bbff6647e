"""collectives.shift_add: the remote copy goes to device_id=(me,), the device that starts
it: the shard never leaves its chip, and each device adds its own shard to itself."""
PUZZLE = "collectives.shift_add"
EXPECT = "goes to the device that starts it"


def shift_add_kernel(x_ref, o_ref, x_vmem, arrived, send_sem, recv_sem, *, axis_name):
    left, right = neighbours(axis_name)
    me = lax.axis_index(axis_name)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)
    sent = pltpu.async_remote_copy(x_ref, arrived, send_sem, recv_sem, device_id=(me,))
    pltpu.sync_copy(x_ref, x_vmem)
    sent.wait()
    x_vmem[...] = x_vmem[...] + arrived[...]
    pltpu.sync_copy(x_vmem, o_ref)
