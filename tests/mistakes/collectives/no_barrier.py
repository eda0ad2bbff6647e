"""collectives.ring_shift: no barrier: the copy writes into the neighbour's output before
that device is known to be in the kernel."""
PUZZLE = "collectives.ring_shift"
EXPECT = "start with the barrier"


def ring_shift_kernel(x_ref, o_ref, send_sem, recv_sem, *, axis_name):
    left, right = neighbours(axis_name)
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,))
    copy.start()
    copy.wait()
