"""collectives.ring_shift: the wait is built from another descriptor, whose receive
semaphore is send_sem: it waits for bytes no copy brings there, and the arrival on
recv_sem is never waited."""
PUZZLE = "collectives.ring_shift"
EXPECT = "Wait on the very descriptor you started"


def ring_shift_kernel(x_ref, o_ref, send_sem, recv_sem, *, axis_name):
    left, right = neighbours(axis_name)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)
    pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,)).start()
    pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, send_sem, device_id=(right,)).wait()
