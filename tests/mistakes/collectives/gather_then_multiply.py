"""collectives.all_gather_matmul: the whole ring first, then every block multiplied: the
matmul waits for the gather, nothing overlaps."""
PUZZLE = "collectives.collective_matmul"
EXPECT = "the matmul waits for the ring"


def all_gather_matmul_kernel(x_ref, w_ref, o_ref, blocks, send_sem, recv_sems, *,
                             axis_name):
    me = lax.axis_index(axis_name)
    n = lax.axis_size(axis_name)
    left, right = neighbours(axis_name)
    rows = x_ref.shape[0]
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
        return carry

    lax.fori_loop(0, n - 1, step, 0)
    for slot in range(n):
        o_ref[pl.ds(slot * rows, rows)] = jnp.dot(
            blocks[slot], w_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)
