"""collectives.shift_add: starts the remote copy without the barrier: it writes into a device that may not have entered the kernel."""
PUZZLE = "collectives.shift_add"
EXPECT = "start with the barrier"


def shift_add_kernel(x_ref, o_ref, x_vmem, arrived, send_sem, recv_sem, *, axis_name):
    left, right = neighbours(axis_name)

    sent = pltpu.async_remote_copy(x_ref, arrived, send_sem, recv_sem, device_id=(right,))
    pltpu.sync_copy(x_ref, x_vmem)
    sent.wait()
    x_vmem[...] = x_vmem[...] + arrived[...]
    pltpu.sync_copy(x_vmem, o_ref)
