"""collectives.all_gather_matmul: each step waits for its copy before multiplying: the ring
and the matmul take turns instead of overlapping."""
PUZZLE = "collectives.collective_matmul"
EXPECT = "At each step start the copy that passes the block on, multiply that block"


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
        copy.start()
        copy.wait()
        multiply(slot)
        return carry

    lax.fori_loop(0, n - 1, step, 0)
    multiply(lax.rem(me + 1, n))
