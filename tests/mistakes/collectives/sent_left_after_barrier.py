"""collectives.ring_shift: the barrier is right (signal the left neighbour, wait for the
right one), but the copy goes to the left neighbour, a device the barrier never heard
from."""
PUZZLE = "collectives.ring_shift"
EXPECT = "A copy marked (left) goes the wrong way"


def ring_shift_kernel(x_ref, o_ref, send_sem, recv_sem, *, axis_name):
    left, right = neighbours(axis_name)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(left,))
    copy.start()
    copy.wait()
