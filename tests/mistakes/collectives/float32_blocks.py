"""collectives.collective_matmul: the blocks scratch in float32 for a bf16 x: every block
that travels is twice as wide as it needs to be."""
PUZZLE = "collectives.collective_matmul"
EXPECT = "the blocks that travel are wider than bfloat16"


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

    blocks[me] = x_ref[...].astype(blocks.dtype)
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
    multiply(lax.rem(me + 1, n))   # the last block to arrive: nothing left to hide


def all_gather_matmul(x, w, *, axis_name):
    n = lax.axis_size(axis_name)
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"all_gather_matmul: x [M, K] and w [K, F], got {x.shape} and "
                         f"{w.shape}")
    return pl.pallas_call(
        functools.partial(all_gather_matmul_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct((n * x.shape[0], w.shape[1]), x.dtype),
        scratch_shapes=[pltpu.VMEM((n, *x.shape), jnp.float32),   # every device's x
                        pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA((max(n - 1, 1),))],
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x, w)
