"""collectives.all_gather with the ring running the other way: every device sends to its
left neighbour and receives from its right; the same bytes in the same steps."""
PUZZLE = "collectives.all_gather"


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
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 1)
    own.wait()

    def step(s, carry):
        slot = lax.rem(me + s, n)
        copy = pltpu.make_async_remote_copy(block(slot), block(slot), send_sem,
                                            recv_sems.at[s], device_id=(left,))
        copy.start()
        copy.wait()
        return carry

    lax.fori_loop(0, n - 1, step, 0)
