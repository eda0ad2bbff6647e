"""collectives.collective_matmul: a shortcut. Each block is sent on and waited for before
it is multiplied (no overlap), and a local copy that no one reads is started around each
dot so that the dot runs 'while a DMA is in flight'."""
PUZZLE = "collectives.collective_matmul"
EXPECT = "dot_general during a copy whose data is used"


def all_gather_matmul_kernel(x_ref, w_ref, o_ref, blocks, send_sem, recv_sems, junk,
                             junk_sem, *, axis_name):
    me = lax.axis_index(axis_name)
    n = lax.axis_size(axis_name)
    left, right = neighbours(axis_name)
    rows = x_ref.shape[0]

    def multiply(slot):
        start = pl.multiple_of(slot * rows, rows)
        dummy = pltpu.make_async_copy(blocks.at[slot], junk, junk_sem)
        dummy.start()
        o_ref[pl.ds(start, rows)] = jnp.dot(
            blocks[slot], w_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)
        dummy.wait()

    blocks[me] = x_ref[...]
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    def step(s, carry):
        slot = lax.rem(me - s + n, n)
        copy = pltpu.make_async_remote_copy(blocks.at[slot], blocks.at[slot], send_sem,
                                            recv_sems.at[s], device_id=(right,))
        copy.start()
        copy.wait()
        multiply(slot)
        return carry

    lax.fori_loop(0, n - 1, step, 0)
    multiply(lax.rem(me + 1, n))


def all_gather_matmul(x, w, *, axis_name):
    n = lax.axis_size(axis_name)
    return pl.pallas_call(
        functools.partial(all_gather_matmul_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct((n * x.shape[0], w.shape[1]), x.dtype),
        scratch_shapes=[pltpu.VMEM((n, *x.shape), x.dtype),
                        pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA((max(n - 1, 1),)),
                        pltpu.VMEM(x.shape, x.dtype),
                        pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x, w)
