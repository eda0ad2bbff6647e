"""collectives.reduce_scatter with the steps as pl.loop, x seen as [N, M, D] (a reshape
around the kernel moves no element) so that a block is x_ref[i], the block number as
Python's % on the traced index, and the partial sum handed on through a local value
instead of a re-read of send_buf."""
PUZZLE = "collectives.reduce_scatter"


def _ring_sum_kernel(x_ref, o_ref, send_buf, recv_buf, send_sem, recv_sem, ready_sem, *,
                     axis_name):
    n = lax.axis_size(axis_name)
    me = lax.axis_index(axis_name)
    to_left, to_right = (me + n - 1) % n, (me + 1) % n
    send_buf[...] = x_ref[(me + n - 1) % n].astype(jnp.float32)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(to_left,))
    pl.semaphore_wait(barrier, 1)

    @pl.loop(0, n - 1)
    def _(s):
        @pl.when(s != 0)
        def _():
            pl.semaphore_wait(ready_sem, 1)

        copy = pltpu.make_async_remote_copy(send_buf, recv_buf, send_sem, recv_sem,
                                            device_id=(to_right,))
        copy.start()
        copy.wait()
        partial_sum = recv_buf[...] + x_ref[(me - s - 2 + 2 * n) % n].astype(jnp.float32)

        @pl.when(s + 2 < n)
        def _():
            pl.semaphore_signal(ready_sem, 1, device_id=(to_left,))

        send_buf[...] = partial_sum

    o_ref[...] = send_buf[...].astype(o_ref.dtype)


def reduce_scatter(x, *, axis_name):
    n = lax.axis_size(axis_name)
    if x.ndim < 1 or x.shape[0] % n:
        raise ValueError(f"reduce_scatter: x of shape {x.shape} does not split into {n} "
                         "blocks along its first dim")
    block = (x.shape[0] // n, *x.shape[1:])
    return pl.pallas_call(
        functools.partial(_ring_sum_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct(block, x.dtype),
        scratch_shapes=[pltpu.VMEM(block, jnp.float32), pltpu.VMEM(block, jnp.float32),
                        pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.REGULAR],
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x.reshape(n, *block))
