"""collectives.ring_shift addressing chips by their mesh coordinates
(device_id_type=pl.DeviceIdType.MESH, as every distributed example of the Pallas docs
does), the neighbours as (me ± 1) mod n, and the handshake before the copy."""
PUZZLE = "collectives.ring_shift"


def ring_shift_kernel(x_ref, o_ref, send_sem, recv_sem, *, axis_name):
    me, n = lax.axis_index(axis_name), lax.axis_size(axis_name)
    left, right = lax.rem(me + n - 1, n), lax.rem(me + 1, n)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,),
                        device_id_type=pl.DeviceIdType.MESH)
    pl.semaphore_wait(barrier, 1)
    copy = pltpu.make_async_remote_copy(src_ref=x_ref, dst_ref=o_ref, send_sem=send_sem,
                                        recv_sem=recv_sem, device_id=(right,),
                                        device_id_type=pl.DeviceIdType.MESH)
    copy.start()
    copy.wait()
