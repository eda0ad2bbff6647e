"""collectives.shift_add with descriptors instead of the one-call helpers: the remote
copy made by pltpu.make_async_remote_copy and .start()ed, the HBM <-> VMEM copies by
pltpu.make_async_copy(...).start() / .wait() on a DMA semaphore of their own, the sum
written as jnp.add, and the neighbours addressed by mesh coordinates
(pl.DeviceIdType.MESH)."""
PUZZLE = "collectives.shift_add"


def _halo_add_kernel(x_ref, o_ref, x_vmem, arrived, send_sem, recv_sem, local_sem, *,
                     axis_name):
    n = lax.axis_size(axis_name)
    me = lax.axis_index(axis_name)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(lax.rem(me + n - 1, n),),
                        device_id_type=pl.DeviceIdType.MESH)
    pl.semaphore_wait(barrier, 1)
    remote = pltpu.make_async_remote_copy(x_ref, arrived, send_sem, recv_sem,
                                          device_id=(lax.rem(me + 1, n),),
                                          device_id_type=pl.DeviceIdType.MESH)
    remote.start()
    load = pltpu.make_async_copy(x_ref, x_vmem, local_sem)
    load.start()
    load.wait()
    remote.wait()
    x_vmem[...] = jnp.add(x_vmem[...], arrived[...])
    store = pltpu.make_async_copy(x_vmem, o_ref, local_sem)
    store.start()
    store.wait()


def shift_add(x, *, axis_name):
    return pl.kernel(
        functools.partial(_halo_add_kernel, axis_name=axis_name),
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        mesh=pltpu.TensorCoreMesh(axis_name="core", num_cores=1),
        scratch_types=[pltpu.VMEM(x.shape, x.dtype), pltpu.VMEM(x.shape, x.dtype),
                       pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                       pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x)
