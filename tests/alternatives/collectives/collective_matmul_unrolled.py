"""collectives.collective_matmul with the ring unrolled by a Python loop, the product
spelled lax.dot_general with float32 accumulation, the output viewed as [N, M, F] (a
reshape around the kernel), every slot number as Python's % on the traced index, and
the block that arrives last multiplied after the loop as the reference does."""
PUZZLE = "collectives.collective_matmul"


def _gather_matmul_kernel(x_ref, w_ref, o_ref, blocks, send_sem, recv_sems, *, axis_name):
    n = lax.axis_size(axis_name)
    me = lax.axis_index(axis_name)

    def multiply(slot):
        product = lax.dot_general(blocks[slot], w_ref[...], (((1,), (0,)), ((), ())),
                                  preferred_element_type=jnp.float32)
        o_ref[slot] = product.astype(o_ref.dtype)

    blocks[me] = x_ref[...]
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=((me + n - 1) % n,))
    pl.semaphore_wait(barrier, 1)
    for step in range(n - 1):
        slot = (me - step) % n
        travelling = pltpu.make_async_remote_copy(
            src_ref=blocks.at[slot], dst_ref=blocks.at[slot], send_sem=send_sem,
            recv_sem=recv_sems.at[step], device_id=((me + 1) % n,))
        travelling.start()
        multiply(slot)
        travelling.wait()
    multiply((me + 1) % n)


def all_gather_matmul(x, w, *, axis_name):
    n = lax.axis_size(axis_name)
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"all_gather_matmul: x must be [M, K] and w [K, F], got {x.shape} "
                         f"and {w.shape}")
    M, F = x.shape[0], w.shape[1]
    out = pl.pallas_call(
        functools.partial(_gather_matmul_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct((n, M, F), x.dtype),
        scratch_shapes=[pltpu.VMEM((n, *x.shape), x.dtype), pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA((max(n - 1, 1),))],
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x, w)
    return out.reshape(n * M, F)
