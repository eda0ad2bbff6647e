"""collectives.reduce_scatter: the loop runs N steps, the ready signals as for N - 1: the last step
waits for a word nobody sends."""
PUZZLE = "collectives.reduce_scatter"
EXPECT = "Does your loop run N steps"


def reduce_scatter_kernel(x_ref, o_ref, send_buf, recv_buf, send_sem, recv_sem, ready_sem,
                          *, axis_name):
    me = lax.axis_index(axis_name)
    n = lax.axis_size(axis_name)
    left, right = neighbours(axis_name)
    rows = o_ref.shape[0]

    def x_block(s):
        # The block whose partial sum this device sends at step s: after N - 1 steps
        # the one that stays is its own, me.
        i = lax.rem(me - s - 1 + 2 * n, n)
        return x_ref[pl.ds(pl.multiple_of(i * rows, rows), rows)].astype(jnp.float32)

    send_buf[...] = x_block(0)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    def step(s, carry):
        @pl.when(s > 0)
        def wait_until_the_right_neighbour_has_read_its_buffer():
            pl.semaphore_wait(ready_sem, 1)

        copy = pltpu.make_async_remote_copy(send_buf, recv_buf, send_sem, recv_sem,
                                            device_id=(right,))
        copy.start()
        copy.wait()
        total = recv_buf[...] + x_block(s + 1)

        @pl.when(s < n - 2)
        def tell_the_left_neighbour_our_buffer_is_free():
            pl.semaphore_signal(ready_sem, 1, device_id=(left,))

        send_buf[...] = total
        return carry

    lax.fori_loop(0, n, step, 0)
    o_ref[...] = send_buf[...].astype(o_ref.dtype)
