"""collectives.all_gather: the receive semaphores (one per step) in the send place of
make_async_remote_copy, and the one send semaphore in the receive place."""
PUZZLE = "collectives.all_gather"
EXPECT = "the two semaphores look swapped"


def all_gather_kernel(x_ref, o_ref, copy_sem, send_sem, recv_sems, *, axis_name):
    me = lax.axis_index(axis_name)
    n = lax.axis_size(axis_name)
    left, right = neighbours(axis_name)
    rows = x_ref.shape[0]

    def block(i):
        return o_ref.at[pl.ds(i * rows, rows)]

    own = pltpu.make_async_copy(x_ref, block(me), copy_sem)
    own.start()
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)
    own.wait()

    def step(s, carry):
        # Pass on the block that arrived last step (our own at step 0); one receive
        # semaphore per step, so that no two copies in flight share one.
        slot = lax.rem(me - s + n, n)
        copy = pltpu.make_async_remote_copy(block(slot), block(slot), recv_sems.at[s],
                                            send_sem, device_id=(right,))
        copy.start()
        copy.wait()
        return carry

    lax.fori_loop(0, n - 1, step, 0)
