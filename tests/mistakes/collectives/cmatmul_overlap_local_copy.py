"""collective matmul whose ring copies are fully serialised (start, wait, and only then
compute); the 'overlap' is with a local VMEM -> VMEM staging copy of the block that has
already arrived (a software pipeline against a copy that carries nothing across chips).
Dodges 'multiply what arrived while the next block travels'."""
PUZZLE = "collectives.collective_matmul"
EXPECT = "while no copy between devices is in flight"


def all_gather_matmul_kernel(x_ref, w_ref, o_ref, blocks, stage, send_sem, recv_sems,
                             local_sem, *, axis_name):
    me = lax.axis_index(axis_name)
    n = lax.axis_size(axis_name)
    left, right = neighbours(axis_name)
    rows = x_ref.shape[0]

    def multiply(value, slot):
        start = pl.multiple_of(slot * rows, rows)
        o_ref[pl.ds(start, rows)] = jnp.dot(
            value, w_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)

    blocks[me] = x_ref[...]
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    def step(s, carry):
        slot = lax.rem(me - s + n, n)
        copy = pltpu.make_async_remote_copy(blocks.at[slot], blocks.at[slot], send_sem,
                                            recv_sems.at[s], device_id=(right,))
        copy.start()
        copy.wait()                                   # the ring copy: nothing overlaps it
        local = pltpu.make_async_copy(blocks.at[slot], stage.at[lax.rem(s, 2)], local_sem)
        local.start()

        @pl.when(s > 0)
        def previous():                               # overlapped with the local copy
            multiply(stage[lax.rem(s + 1, 2)], lax.rem(slot + 1, n))

        local.wait()
        return carry

    lax.fori_loop(0, n - 1, step, 0)
    last = lax.rem(me + 1, n)
    local = pltpu.make_async_copy(blocks.at[last], stage.at[lax.rem(n - 1, 2)], local_sem)
    local.start()

    @pl.when(n > 1)
    def second_last():
        multiply(stage[lax.rem(n, 2)], lax.rem(me + 2, n))

    local.wait()
    multiply(stage[lax.rem(n - 1, 2)], last)


def all_gather_matmul(x, w, *, axis_name):
    n = lax.axis_size(axis_name)
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"all_gather_matmul: x [M, K] and w [K, F], got {x.shape} and "
                         f"{w.shape}")
    return pl.pallas_call(
        functools.partial(all_gather_matmul_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct((n * x.shape[0], w.shape[1]), x.dtype),
        scratch_shapes=[pltpu.VMEM((n, *x.shape), x.dtype),
                        pltpu.VMEM((2, *x.shape), x.dtype),
                        pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA((max(n - 1, 1),)),
                        pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x, w)
