"""collectives.all_reduce: the reduce-scatter under it keeps send_buf and recv_buf in x's
dtype: bf16 partial sums travel (half the bytes), and sums that cancel lose their small
part. On 2 chips that is as many bytes as sending all of x to the other one."""
PUZZLE = "collectives.all_reduce"
EXPECT = "partial sums travel in x's dtype (bfloat16 here), not float32"


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
        return x_ref[pl.ds(pl.multiple_of(i * rows, rows), rows)].astype(send_buf.dtype)

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

    lax.fori_loop(0, n - 1, step, 0)
    o_ref[...] = send_buf[...].astype(o_ref.dtype)


def reduce_scatter(x, *, axis_name):
    n = lax.axis_size(axis_name)
    _check_rows("reduce_scatter", x, n)
    block = (x.shape[0] // n, *x.shape[1:])
    return pl.pallas_call(
        functools.partial(reduce_scatter_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct(block, x.dtype),
        scratch_shapes=[pltpu.VMEM(block, x.dtype),   # the partial sum we send
                        pltpu.VMEM(block, x.dtype),   # where the left one's lands
                        pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.REGULAR],     # "my recv_buf is free"
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x)
