"""Tests for exercises/collectives.py. Run them, don't edit them:

    pytest exercises/test_collectives.py                      # all puzzles of the chapter
    pytest exercises/test_collectives.py -k all_gather        # one puzzle
    pytest exercises/test_collectives.py -k all_gather --hint

Every test runs your function on a ring of simulated chips: a 1-D mesh over
2, 4 or 8 of the CPU devices the kit asks JAX for, with jax.shard_map handing
each device its own shard, exactly as on a slice of real TPUs. The values are
compared with the jax.lax collective (exactly for moves, to float32 tolerance
for sums), on every device. Before your kernel runs, the kit walks it on every
device together and pairs every remote copy with its waits, on both sides, and
every signal with its wait: a wait that no device will satisfy (a TPU would
hang), a copy into a device that has not said it is in the kernel (the
barrier), a copy into a buffer the neighbour may still be reading, a copy never
waited where it lands, each is named with its line. While it runs, interpret
mode reports a read of a buffer whose copy has not landed as a race. The bytes
your copies move from chip to chip are counted: each collective moves what
the ring moves, and no more. Tests marked `tpu` run on a real multi-chip slice
and are skipped elsewhere.
"""
import functools

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from pytest_pallas_hints import (Structure, chapter, check, check_overlap, check_traffic,
                                 check_work, lowers_for_tpu, measure)
from pytest_pallas_hints.lessons.collectives import (
    AXIS, check_copies_leave, check_on_every_device, check_remote_bytes, check_ring_buffers,
    check_values_or_bytes, ring)

collectives = chapter("collectives")

puzzle = pytest.mark.puzzle
on_tpu = pytest.mark.tpu
EVERY_CHIP = None   # a tpu-marked test: every chip of the slice

# What each lesson requires of your program, checked from its trace: your own kernel
# moves the data with remote DMAs of its own (and the puzzle's work happens inside it);
# nothing but reshapes around it.
REMOTE = Structure(inside={"dma_start", "dma_wait"})


# --- the ring ----------------------------------------------------------------

def on_ring(fn, mesh, *args, in_specs=P(AXIS), out_specs=P(AXIS), structure=REMOTE):
    """fn(local shards..., axis_name="x") on every device of the mesh, run and measured
    once; the outputs of all devices, concatenated along the first dim."""
    everywhere = jax.shard_map(functools.partial(fn, axis_name=AXIS), mesh=mesh,
                               in_specs=in_specs, out_specs=out_specs, check_vma=False)
    with jax.set_mesh(mesh):
        return measure(everywhere, *args, structure=structure)


def lowers(ran, mesh):
    with jax.set_mesh(mesh):
        lowers_for_tpu(ran)


def devices(mesh) -> int:
    return mesh.devices.size


def check_no_hbm_traffic(ran):
    """x and the output stay in HBM: the kernel's copies are remote (or HBM to HBM)."""
    check_traffic(ran, reference=0)


# 1 -------------------------------------------------------------------------
def ring_table(n):
    return np.array([[(d - 1) % n, d, (d + 1) % n] for d in range(n)], np.int32)


@puzzle("collectives.device_ids")
@pytest.mark.parametrize("n", [
    pytest.param(2, id="N=2 (left and right are the same chip)"),
    pytest.param(8, id="N=8"),
    pytest.param(EVERY_CHIP, id="N=all-tpu", marks=on_tpu),
])
def test_device_ids(n):
    mesh = ring(n)
    n = devices(mesh)
    with jax.set_mesh(mesh):
        ran = measure(collectives.device_ids, mesh=mesh, axis_name=AXIS,
                      structure=Structure(inside={"axis_index"}))
    check_on_every_device(ran, n)
    table = ring_table(n)
    wrapped = table.copy()
    wrapped[0, 0] = -1
    unwrapped = table.copy()
    unwrapped[-1, 2] = n   # the last device's right neighbour, me + 1 not taken mod N
    check(ran, table, blocks=(1, None), axes="N ids", likely={
        "left_negative": wrapped, "left_right_swapped": table[:, ::-1],
        "right_not_wrapped": unwrapped})
    lowers(ran, mesh)


# 2 -------------------------------------------------------------------------
@puzzle("collectives.ring_shift")
@pytest.mark.parametrize("n, shard, dtype", [
    pytest.param(4, (8, 128), "float32", id="N=4 [8,128]"),
    pytest.param(2, (3, 5), "bfloat16", id="N=2 [3,5] bf16 (left is right, an odd shape)"),
    pytest.param(EVERY_CHIP, (1024, 1024), "float32", id="N=all [1024,1024]-tpu",
                 marks=on_tpu),
])
def test_ring_shift(n, shard, dtype, rng):
    mesh = ring(n)
    n = devices(mesh)
    rows = shard[0]
    x = rng.normal((n * rows, *shard[1:]), dtype)
    ran = on_ring(collectives.ring_shift, mesh, x)
    check_copies_leave(ran)
    check(ran, np.roll(x, rows, axis=0), blocks=(rows, None), axes="N·rows D", likely={
        "sent_left": np.roll(x, -rows, axis=0), "not_sent": x})
    check_remote_bytes(ran, x.nbytes, what="one shard per chip, sent once")
    check_no_hbm_traffic(ran)
    lowers(ran, mesh)


# 3 -------------------------------------------------------------------------
def gathered_by_every_device(x, n):
    return np.concatenate([x] * n, axis=0)


@puzzle("collectives.all_gather")
@pytest.mark.parametrize("n, shard, dtype", [
    pytest.param(4, (8, 128), "float32", id="N=4 [8,128]"),
    pytest.param(8, (1, 256), "int32", id="N=8 [1,256] int32 (one-row shards)"),
    pytest.param(EVERY_CHIP, (1024, 1024), "float32", id="N=all [1024,1024]-tpu",
                 marks=on_tpu),
])
def test_all_gather(n, shard, dtype, rng):
    mesh = ring(n)
    n = devices(mesh)
    rows = shard[0]
    x = rng.integers((n * rows, *shard[1:]), -100, 100, dtype) if dtype == "int32" \
        else rng.normal((n * rows, *shard[1:]), dtype)

    def own_block_only():   # each device has only its own block in place
        out = np.full((n, n * rows, *shard[1:]), np.nan if dtype != "int32" else 0, x.dtype)
        for d in range(n):
            out[d, d * rows:(d + 1) * rows] = x[d * rows:(d + 1) * rows]
        return out.reshape(n * n * rows, *shard[1:])

    ran = on_ring(collectives.all_gather, mesh, x)
    check_copies_leave(ran)
    check(ran, gathered_by_every_device(x, n), blocks=(n * rows, None), axes="N·N·rows D",
          likely={"own_block_only": own_block_only})
    shard_bytes = x.nbytes // n
    check_remote_bytes(ran, n * (n - 1) * shard_bytes, what="the ring: N - 1 steps, one "
                       "shard each, on every chip", likely={"n_steps": n * n * shard_bytes})
    check_no_hbm_traffic(ran)
    lowers(ran, mesh)


# 4 -------------------------------------------------------------------------
def scattered_sums(x, n):
    """psum_scatter(tiled): device d holds the sum over devices of their block d."""
    local = x.astype(np.float64).reshape(n, n, -1, *x.shape[1:])   # [device, block, ...]
    return local.sum(axis=0).reshape(-1, *x.shape[1:])


@puzzle("collectives.reduce_scatter")
@pytest.mark.parametrize("n, block, dtype", [
    pytest.param(8, (8, 128), "float32", id="N=8 blocks [8,128]"),
    pytest.param(2, (16, 128), "bfloat16", id="N=2 blocks [16,128] bf16 (a single step)"),
    pytest.param(8, (8, 128), "bfloat16", id="N=8 blocks [8,128] bf16, sums that cancel"),
    pytest.param(EVERY_CHIP, (512, 1024), "float32", id="N=all blocks [512,1024]-tpu",
                 marks=on_tpu),
])
def test_reduce_scatter(n, block, dtype, rng):
    mesh = ring(n)
    n = devices(mesh)
    x = rng.normal((n * n * block[0], *block[1:]), dtype)
    if dtype == "bfloat16" and n >= 4:
        # Half the devices add 64, the other half -64: the partial sums grow to hundreds
        # and the totals stay small, as gradients that cancel do. Partial sums kept in
        # bf16 (8 bits of mantissa) lose the small part; float32 ones keep it exactly.
        offset = np.where(np.arange(n) < n // 2, 64.0, -64.0).repeat(n * block[0])
        x = (x.astype(np.float32) + offset.reshape(-1, *[1] * (x.ndim - 1))).astype(x.dtype)
    sums = scattered_sums(x, n)
    rows = block[0]

    def own_blocks_only():   # device d keeps its own block d, nothing added
        local = x.reshape(n, n, rows, *block[1:])
        return np.stack([local[d, d] for d in range(n)]).reshape(-1, *block[1:])

    ran = on_ring(collectives.reduce_scatter, mesh, x)
    check_copies_leave(ran)
    partial_bytes = int(np.prod(block)) * 4   # float32 partial sums travel
    moved = functools.partial(
        check_remote_bytes, ran, n * (n - 1) * partial_bytes, what="the ring: N - 1 steps, "
        "one float32 block of partial sums each, on every chip",
        likely={"n_steps": n * n * partial_bytes}, travels=np.float32)
    check_values_or_bytes(ran, sums.astype(x.dtype), moved, blocks=(rows, None),
                          axes="N·rows D", likely={
                              "own_block_only": own_blocks_only,
                              "block_off_by_one": lambda: np.roll(sums, -rows, axis=0).astype(
                                  x.dtype)})
    moved()
    check_ring_buffers(ran, partial_bytes, n=n)
    lowers(ran, mesh)


# 5 -------------------------------------------------------------------------
@puzzle("collectives.all_reduce")
@pytest.mark.parametrize("n, block, dtype", [
    pytest.param(4, (8, 128), "float32", id="N=4 blocks [8,128]"),
    pytest.param(8, (8, 128), "bfloat16", id="N=8 blocks [8,128] bf16, sums that cancel"),
    pytest.param(2, (16, 256), "bfloat16", id="N=2 blocks [16,256] bf16"),
    pytest.param(EVERY_CHIP, (512, 1024), "float32", id="N=all blocks [512,1024]-tpu",
                 marks=on_tpu),
])
def test_all_reduce(n, block, dtype, rng):
    mesh = ring(n)
    n = devices(mesh)
    x = rng.normal((n * n * block[0], *block[1:]), dtype)
    if dtype == "bfloat16" and n >= 4:   # as in reduce_scatter: partial sums of hundreds
        offset = np.where(np.arange(n) < n // 2, 64.0, -64.0).repeat(n * block[0])
        x = (x.astype(np.float32) + offset.reshape(-1, *[1] * (x.ndim - 1))).astype(x.dtype)
    local = x.astype(np.float64).reshape(n, -1, *block[1:])
    total = local.sum(axis=0)
    ran = on_ring(collectives.all_reduce, mesh, x, structure=REMOTE.where(kernels=2))
    check_copies_leave(ran)
    block_bytes = int(np.prod(block))
    scatter = n * (n - 1) * block_bytes * 4        # float32 partial sums
    gather = n * (n - 1) * block_bytes * x.itemsize
    moved = functools.partial(check_remote_bytes, ran, scatter + gather, what=(
        "reduce-scatter then all-gather: 2 (N - 1) blocks of 1/N of x per chip, where "
        "sending all of x to every chip would move N - 1 times x"), likely={
        "everything_to_everyone": n * (n - 1) * x.nbytes // n,
        "partial_sums_in_x_dtype": 2 * gather})
    check_values_or_bytes(ran, np.concatenate([total] * n).astype(x.dtype),
                          moved, blocks=(n * block[0], None), axes="N·rows D", likely={
                              "gathered_then_summed": lambda: (n * local).reshape(
                                  x.shape).astype(x.dtype)})
    moved()
    check_ring_buffers(ran, block_bytes * 4, n=n, gathered=n * block_bytes * x.itemsize)
    lowers(ran, mesh)


# 6 -------------------------------------------------------------------------
@puzzle("collectives.collective_matmul")
@pytest.mark.parametrize("n, M, K, F, dtype", [
    pytest.param(4, 8, 128, 256, "float32", id="N=4 M=8 K=128 F=256"),
    pytest.param(2, 16, 256, 128, "bfloat16", id="N=2 M=16 K=256 F=128 bf16 (one step)"),
    pytest.param(EVERY_CHIP, 512, 1024, 1024, "bfloat16", id="N=all M=512 K=F=1024-tpu",
                 marks=on_tpu),
])
def test_collective_matmul(n, M, K, F, dtype, rng):
    mesh = ring(n)
    n = devices(mesh)
    x = rng.normal((n * M, K), dtype)
    w = rng.normal((K, F), dtype, scale=K ** -0.5)
    ran = on_ring(collectives.all_gather_matmul, mesh, x, w, in_specs=(P(AXIS), P()),
                  structure=REMOTE.where(inside={"dma_start", "dma_wait", "dot_general"}))
    check_copies_leave(ran)
    full = (x.astype(np.float64) @ w.astype(np.float64)).astype(x.dtype)

    def last_arrival_not_multiplied():   # device d never wrote block (d + 1) mod N
        out = np.stack([full] * n).astype(np.float32)
        for d in range(n):
            out[d, (d + 1) % n * M:((d + 1) % n + 1) * M] = np.nan
        return out.reshape(n * n * M, F).astype(x.dtype)

    check(ran, np.concatenate([full] * n), blocks=(M, None), axes="N·N·M F",
          likely={"last_arrival_not_multiplied": last_arrival_not_multiplied})
    check_work(ran, flops=n * 2 * n * M * K * F)
    check_remote_bytes(ran, n * (n - 1) * M * K * x.itemsize, what="the ring: N - 1 "
                       "steps, one block of x each, on every chip", travels=x.dtype)
    check_overlap(ran, work="dot_general", at_least=n * (n - 1), remote=True, why=(
        "Start the copy that passes block i on before you multiply it, and wait for it "
        "after: the next block travels while this one is multiplied."))
    lowers(ran, mesh)


# 7 -------------------------------------------------------------------------
@puzzle("collectives.shift_add")
@pytest.mark.parametrize("n, shard, dtype", [
    pytest.param(4, (8, 128), "float32", id="N=4 [8,128]"),
    pytest.param(2, (16, 256), "bfloat16", id="N=2 [16,256] bf16 (left is right)"),
    pytest.param(EVERY_CHIP, (1024, 1024), "float32", id="N=all [1024,1024]-tpu",
                 marks=on_tpu),
])
def test_shift_add(n, shard, dtype, rng):
    mesh = ring(n, needs="pl.kernel over a TensorCoreMesh")
    n = devices(mesh)
    rows = shard[0]
    x = rng.normal((n * rows, *shard[1:]), dtype)
    ran = on_ring(collectives.shift_add, mesh, x, structure=REMOTE.where(api="pl.kernel"))
    check_copies_leave(ran)
    wide = x.astype(np.float32)
    check(ran, (wide + np.roll(wide, rows, axis=0)).astype(x.dtype), blocks=(rows, None),
          axes="N·rows D", likely={"added_right": lambda: (
              wide + np.roll(wide, -rows, axis=0)).astype(x.dtype),
              "doubled": lambda: (2 * wide).astype(x.dtype)})
    check_remote_bytes(ran, x.nbytes, what="one shard per chip, sent once")
    lowers(ran, mesh)
