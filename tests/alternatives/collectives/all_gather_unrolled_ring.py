"""collectives.all_gather with the ring unrolled by a Python loop (lax.axis_size is a
Python int), the block numbers as Python's % on the traced index, neighbours from
jnp.where, the own block put in place by pltpu.async_copy(...).wait(), and the output
seen as [N, M, ...] (a reshape around the kernel moves no element), so that a block is
o_ref.at[slot]."""
PUZZLE = "collectives.all_gather"


def _ring_gather_kernel(x_ref, o_ref, copy_sem, send_sem, recv_sems, *, axis_name):
    n = lax.axis_size(axis_name)
    me = lax.axis_index(axis_name)
    left = jnp.where(me == 0, n - 1, me - 1)
    right = jnp.where(me == n - 1, 0, me + 1)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pltpu.async_copy(x_ref, o_ref.at[me], copy_sem).wait()
    pl.semaphore_wait(barrier, 1)
    for step in range(n - 1):
        slot = (me - step) % n       # the block that arrived at the step before
        pltpu.async_remote_copy(o_ref.at[slot], o_ref.at[slot], send_sem,
                                recv_sems.at[step], device_id=(right,)).wait()


def all_gather(x, *, axis_name):
    n = lax.axis_size(axis_name)
    gathered = pl.pallas_call(
        functools.partial(_ring_gather_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct((n, *x.shape), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA((max(n - 1, 1),))],
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x)
    return gathered.reshape(n * x.shape[0], *x.shape[1:])
