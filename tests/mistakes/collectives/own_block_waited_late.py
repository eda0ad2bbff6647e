"""collectives.all_gather: the local copy of the device's own block is waited only after
the ring: step 0 sends that block on before it has landed."""
PUZZLE = "collectives.all_gather"
EXPECT = "At step 0 that is your own block"


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

    def step(s, carry):
        # Pass on the block that arrived last step (our own at step 0); one receive
        # semaphore per step, so that no two copies in flight share one.
        slot = lax.rem(me - s + n, n)
        copy = pltpu.make_async_remote_copy(block(slot), block(slot), send_sem,
                                            recv_sems.at[s], device_id=(right,))
        copy.start()
        copy.wait()
        return carry

    lax.fori_loop(0, n - 1, step, 0)
    own.wait()
