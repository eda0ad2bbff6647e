"""collectives.collective_matmul: the block that arrives at the last step is never
multiplied (nothing after the loop): one block of each device's output stays unwritten."""
PUZZLE = "collectives.collective_matmul"
EXPECT = "the block that arrives at the last step"


def all_gather_matmul_kernel(x_ref, w_ref, o_ref, blocks, send_sem, recv_sems, *,
                             axis_name):
    me = lax.axis_index(axis_name)
    n = lax.axis_size(axis_name)
    left, right = neighbours(axis_name)
    rows = x_ref.shape[0]

    def multiply(slot):
        start = pl.multiple_of(slot * rows, rows)
        o_ref[pl.ds(start, rows)] = jnp.dot(
            blocks[slot], w_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)

    blocks[me] = x_ref[...]
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    def step(s, carry):
        slot = lax.rem(me - s + n, n)
        copy = pltpu.make_async_remote_copy(blocks.at[slot], blocks.at[slot], send_sem,
                                            recv_sems.at[s], device_id=(right,))
        copy.start()      # the block travels on...
        multiply(slot)    # ...while we multiply it
        copy.wait()
        return carry

    lax.fori_loop(0, n - 1, step, 0)
