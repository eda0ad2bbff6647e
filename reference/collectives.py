"""Collectives: several chips, remote DMAs, rings — reference solutions.

Same functions and signatures as exercises/collectives.py. Learners see these
through `pytest --hint=3`, so they are written as code worth copying.
"""
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec


def _check_rows(name, x, n):
    """x's leading dim splits into n blocks, one per device."""
    if x.ndim < 1 or x.shape[0] % n:
        raise ValueError(f"{name}: x's leading dim must be a multiple of the {n} devices "
                         f"of the ring, got shape {x.shape}")


# 1. collectives.device_ids — simulated chips, one kernel per device -------------

def neighbours(axis_name):
    me = lax.axis_index(axis_name)
    n = lax.axis_size(axis_name)
    return lax.rem(me + n - 1, n), lax.rem(me + 1, n)   # + n: no negative ids


def device_ids_kernel(o_ref, *, axis_name):
    left, right = neighbours(axis_name)
    o_ref[0, 0] = left
    o_ref[0, 1] = lax.axis_index(axis_name)
    o_ref[0, 2] = right


def device_ids(mesh, *, axis_name):
    def on_each_device():
        return pl.pallas_call(
            functools.partial(device_ids_kernel, axis_name=axis_name),
            out_shape=jax.ShapeDtypeStruct((1, 3), jnp.int32),
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),   # three scalars
        )()

    return jax.shard_map(on_each_device, mesh=mesh, in_specs=(),
                         out_specs=PartitionSpec(axis_name), check_vma=False)()


# 2. collectives.ring_shift — a remote DMA to the right neighbour -----------------

def ring_shift_kernel(x_ref, o_ref, send_sem, recv_sem, *, axis_name):
    left, right = neighbours(axis_name)
    # The left neighbour writes into our o_ref: tell it we are in the kernel, and wait
    # until the right neighbour, whose o_ref we write, has told us the same.
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem,
                                        device_id=(right,))
    copy.start()
    copy.wait()   # ours has left (send_sem), the left neighbour's has landed (recv_sem)


def ring_shift(x, *, axis_name):
    return pl.pallas_call(
        functools.partial(ring_shift_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),   # the barrier's
    )(x)


# 3. collectives.all_gather — N - 1 steps around the ring -------------------------

def all_gather_kernel(x_ref, o_ref, copy_sem, send_sem, recv_sems, *, axis_name):
    me = lax.axis_index(axis_name)
    n = lax.axis_size(axis_name)
    left, right = neighbours(axis_name)
    rows = x_ref.shape[0]

    def block(i):
        return o_ref.at[pl.ds(i * rows, rows)]

    own = pltpu.make_async_copy(x_ref, block(me), copy_sem)
    own.start()
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)
    own.wait()

    def step(s, carry):
        # Pass on the block that arrived last step (our own at step 0); one receive
        # semaphore per step, so that no two copies in flight share one.
        slot = lax.rem(me - s + n, n)
        copy = pltpu.make_async_remote_copy(block(slot), block(slot), send_sem,
                                            recv_sems.at[s], device_id=(right,))
        copy.start()
        copy.wait()
        return carry

    lax.fori_loop(0, n - 1, step, 0)


def all_gather(x, *, axis_name):
    n = lax.axis_size(axis_name)
    return pl.pallas_call(
        functools.partial(all_gather_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct((n * x.shape[0], *x.shape[1:]), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA((max(n - 1, 1),))],
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x)


# 4. collectives.reduce_scatter — add, pass on, N - 1 times ------------------------

def reduce_scatter_kernel(x_ref, o_ref, send_buf, recv_buf, send_sem, recv_sem, ready_sem,
                          *, axis_name):
    me = lax.axis_index(axis_name)
    n = lax.axis_size(axis_name)
    left, right = neighbours(axis_name)
    rows = o_ref.shape[0]

    def x_block(s):
        # The block whose partial sum this device sends at step s: after N - 1 steps
        # the one that stays is its own, me.
        i = lax.rem(me - s - 1 + 2 * n, n)
        return x_ref[pl.ds(pl.multiple_of(i * rows, rows), rows)].astype(jnp.float32)

    send_buf[...] = x_block(0)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    def step(s, carry):
        @pl.when(s > 0)
        def wait_until_the_right_neighbour_has_read_its_buffer():
            pl.semaphore_wait(ready_sem, 1)

        copy = pltpu.make_async_remote_copy(send_buf, recv_buf, send_sem, recv_sem,
                                            device_id=(right,))
        copy.start()
        copy.wait()
        total = recv_buf[...] + x_block(s + 1)

        @pl.when(s < n - 2)
        def tell_the_left_neighbour_our_buffer_is_free():
            pl.semaphore_signal(ready_sem, 1, device_id=(left,))

        send_buf[...] = total
        return carry

    lax.fori_loop(0, n - 1, step, 0)
    o_ref[...] = send_buf[...].astype(o_ref.dtype)


def reduce_scatter(x, *, axis_name):
    n = lax.axis_size(axis_name)
    _check_rows("reduce_scatter", x, n)
    block = (x.shape[0] // n, *x.shape[1:])
    return pl.pallas_call(
        functools.partial(reduce_scatter_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct(block, x.dtype),
        scratch_shapes=[pltpu.VMEM(block, jnp.float32),   # the partial sum we send
                        pltpu.VMEM(block, jnp.float32),   # where the left one's lands
                        pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.REGULAR],     # "my recv_buf is free"
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x)


# 5. collectives.all_reduce — reduce-scatter, then all-gather ---------------------

def all_reduce(x, *, axis_name):
    return all_gather(reduce_scatter(x, axis_name=axis_name), axis_name=axis_name)


# 6. collectives.collective_matmul — multiply what arrived while the next block travels

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
    multiply(lax.rem(me + 1, n))   # the last block to arrive: nothing left to hide


def all_gather_matmul(x, w, *, axis_name):
    n = lax.axis_size(axis_name)
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"all_gather_matmul: x [M, K] and w [K, F], got {x.shape} and "
                         f"{w.shape}")
    return pl.pallas_call(
        functools.partial(all_gather_matmul_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct((n * x.shape[0], w.shape[1]), x.dtype),
        scratch_shapes=[pltpu.VMEM((n, *x.shape), x.dtype),   # every device's x
                        pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA((max(n - 1, 1),))],
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x, w)


# 7. collectives.shift_add — the same ideas in today's API: pl.kernel over a mesh --

def shift_add_kernel(x_ref, o_ref, x_vmem, arrived, send_sem, recv_sem, *, axis_name):
    left, right = neighbours(axis_name)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)
    # Our shard leaves for the right neighbour's `arrived` while we copy it into VMEM.
    sent = pltpu.async_remote_copy(x_ref, arrived, send_sem, recv_sem, device_id=(right,))
    pltpu.sync_copy(x_ref, x_vmem)   # HBM -> VMEM, returns when it has landed
    sent.wait()                      # ours has left, the left neighbour's has landed
    x_vmem[...] = x_vmem[...] + arrived[...]
    pltpu.sync_copy(x_vmem, o_ref)   # VMEM -> HBM


def shift_add(x, *, axis_name):
    return pl.kernel(
        functools.partial(shift_add_kernel, axis_name=axis_name),
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        mesh=pltpu.TensorCoreMesh(axis_name="core", num_cores=1),
        scratch_types=[pltpu.VMEM(x.shape, x.dtype), pltpu.VMEM(x.shape, x.dtype),
                       pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x)
