"""collectives.ring_shift: waits only for the arriving copy (wait_recv): the sending side,
on send_sem, is never waited."""
PUZZLE = "collectives.ring_shift"
EXPECT = "the sending side of this remote copy is never waited"


def ring_shift_kernel(x_ref, o_ref, send_sem, recv_sem, *, axis_name):
    left, right = neighbours(axis_name)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,))
    copy.start()
    copy.wait_recv()
