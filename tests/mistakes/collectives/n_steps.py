"""collectives.all_gather: N steps round the ring instead of N - 1: the last step sends
every neighbour the block it started with (same values, a step of bytes too many)."""
PUZZLE = "collectives.all_gather"
EXPECT = "your ring runs N steps"


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
        slot = lax.rem(me - s + n, n)
        copy = pltpu.make_async_remote_copy(block(slot), block(slot), send_sem,
                                            recv_sems.at[s], device_id=(right,))
        copy.start()
        copy.wait()
        return carry

    lax.fori_loop(0, n, step, 0)


def all_gather(x, *, axis_name):
    n = lax.axis_size(axis_name)
    return pl.pallas_call(
        functools.partial(all_gather_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct((n * x.shape[0], *x.shape[1:]), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA((n,))],
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x)
