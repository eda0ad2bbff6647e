"""collectives.collective_matmul with each product held in a value while the copy is in
flight and stored to o_ref after copy.wait(): the same dots and the same overlap. (The
walk's marks were shared by the devices of the mesh, so another device's turn through the
loop body overwrote them across the wait: this right kernel was told its dots never reach
an output.)"""
PUZZLE = "collectives.collective_matmul"


def all_gather_matmul_kernel(x_ref, w_ref, o_ref, blocks, send_sem, recv_sems, *,
                             axis_name):
    me = lax.axis_index(axis_name)
    n = lax.axis_size(axis_name)
    left, right = neighbours(axis_name)
    rows = x_ref.shape[0]

    def product(slot):
        return jnp.dot(blocks[slot], w_ref[...], preferred_element_type=jnp.float32)

    def store(slot, value):
        start = pl.multiple_of(slot * rows, rows)
        o_ref[pl.ds(start, rows)] = value.astype(o_ref.dtype)

    blocks[me] = x_ref[...]
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    def step(s, carry):
        slot = lax.rem(me - s + n, n)
        copy = pltpu.make_async_remote_copy(blocks.at[slot], blocks.at[slot], send_sem,
                                            recv_sems.at[s], device_id=(right,))
        copy.start()
        p = product(slot)
        copy.wait()
        store(slot, p)
        return carry

    lax.fori_loop(0, n - 1, step, 0)
    last = lax.rem(me + 1, n)
    store(last, product(last))
