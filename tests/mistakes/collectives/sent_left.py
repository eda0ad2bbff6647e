"""collectives.ring_shift: the copy goes to the left neighbour (and the barrier tells the
right one): every shard moves the wrong way round the ring."""
PUZZLE = "collectives.ring_shift"
EXPECT = "every shard moved one device to the left"


def ring_shift_kernel(x_ref, o_ref, send_sem, recv_sem, *, axis_name):
    left, right = neighbours(axis_name)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 1)
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(left,))
    copy.start()
    copy.wait()
