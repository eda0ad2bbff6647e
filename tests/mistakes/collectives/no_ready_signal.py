"""collectives.reduce_scatter: no "ready" handshake: the next partial sum is sent into the
neighbour's recv_buf before that device said it had read the last one."""
PUZZLE = "collectives.reduce_scatter"
EXPECT = "before it has said it read the last one"


def reduce_scatter_kernel(x_ref, o_ref, send_buf, recv_buf, send_sem, recv_sem, ready_sem,
                          *, axis_name):
    me = lax.axis_index(axis_name)
    n = lax.axis_size(axis_name)
    left, right = neighbours(axis_name)
    rows = o_ref.shape[0]

    def x_block(s):
        i = lax.rem(me - s - 1 + 2 * n, n)
        return x_ref[pl.ds(pl.multiple_of(i * rows, rows), rows)].astype(jnp.float32)

    send_buf[...] = x_block(0)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    def step(s, carry):
        copy = pltpu.make_async_remote_copy(send_buf, recv_buf, send_sem, recv_sem,
                                            device_id=(right,))
        copy.start()
        copy.wait()
        send_buf[...] = recv_buf[...] + x_block(s + 1)
        return carry

    lax.fori_loop(0, n - 1, step, 0)
    o_ref[...] = send_buf[...].astype(o_ref.dtype)
