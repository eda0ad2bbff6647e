"""Kernels on a mesh of simulated chips (a shard_map around a pallas_call): the kit
reads the kernel inside the shard_map as run once per device, walks every device's
copy of it together (lax.axis_index known on each), counts the bytes of remote DMAs,
and its DMA ledger follows copies and signals from device to device: a wait that no
device will satisfy, a copy into a device that has not said it is in the kernel, a
second copy into a buffer (or onto a receive semaphore) before the receiver said it
read the first, a copy never waited where it lands, a signal never waited for: each
is named with its line before anything runs."""
import functools

import jax
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

from pytest_pallas_hints import checking, jaxcompat, runtime
from pytest_pallas_hints.checking import Diagnosed, measure

ROWS, D, DEVICES = 8, 128, 4


@pytest.fixture(autouse=True, scope="module")
def interpret_mode():
    why = jaxcompat.cpu_devices_missing(DEVICES)
    if why:
        pytest.skip(why)
    runtime.use_interpret_mode(True)


def neighbours(axis):
    me, n = lax.axis_index(axis), lax.axis_size(axis)
    return lax.rem(me + n - 1, n), lax.rem(me + 1, n)


def ring(x_ref, o_ref, send_sem, recv_sem, *, barrier=True, signals=1, waits=1,
         copies=1, wait=True, recv_sems=False, to="right"):
    """Sends x to the right neighbour's o (copies times, into the same window), after a
    barrier where the left neighbour is told (signals times) and the right one's word
    waited for (waits times)."""
    left, right = neighbours("x")
    if barrier:
        sem = pltpu.get_barrier_semaphore()
        for _ in range(signals):
            pl.semaphore_signal(sem, 1, device_id=(left,))
        pl.semaphore_wait(sem, waits)
    for i in range(copies):
        copy = pltpu.make_async_remote_copy(
            x_ref, o_ref, send_sem, recv_sem.at[i] if recv_sems else recv_sem,
            device_id=(right if to == "right" else left,))
        copy.start()
        if wait == "recv":
            copy.wait_recv()
        elif wait:
            copy.wait()
        else:
            copy.wait_send()


def shifted(x, *, copies=1, recv_sems=False, collective_id=0, slots=None, **options):
    recv = pltpu.SemaphoreType.DMA((slots or copies,)) if recv_sems else pltpu.SemaphoreType.DMA
    return pl.pallas_call(
        functools.partial(ring, copies=copies, recv_sems=recv_sems, **options),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, recv],
        compiler_params=pltpu.CompilerParams(collective_id=collective_id))(x)


def on_mesh(**options):
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:DEVICES]), ("x",))
    x = np.arange(DEVICES * ROWS * D, dtype=np.float32).reshape(DEVICES * ROWS, D)
    fn = jax.shard_map(functools.partial(shifted, **options), mesh=mesh, in_specs=P("x"),
                       out_specs=P("x"), check_vma=False)
    with jax.set_mesh(mesh):
        return measure(fn, x, structure=None), x, mesh


def test_a_kernel_in_a_shard_map_runs_once_per_device_and_its_remote_bytes_are_counted():
    ran, x, mesh = on_mesh()
    assert [site.devices for site in ran.program.sites] == [DEVICES]
    assert [run.device for run in ran.executed] == list(range(DEVICES))
    np.testing.assert_array_equal(np.asarray(ran.output), np.roll(x, ROWS, axis=0))
    block = ROWS * D * 4
    assert ran.remote_bytes == DEVICES * block
    assert [counts.remote[0][:2] for counts in ran.counts] == [
        ((d + 1) % DEVICES, block) for d in range(DEVICES)]
    assert ran.counts[0].dmas_followed and not ran.counts[0].dma_problems
    with jax.set_mesh(mesh):
        checking.lowers_for_tpu(ran)


def test_lax_axis_index_is_each_devices_own():
    def kernel(o_ref):
        @pl.when(lax.axis_index("x") == 2)
        def _():
            o_ref[...] = o_ref[...] * 2.0

    def call(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((ROWS, D), x.dtype))()

    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:DEVICES]), ("x",))
    fn = jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    with jax.set_mesh(mesh):
        ran = measure(fn, np.zeros((DEVICES * ROWS, D), np.float32), structure=None)
    assert [counts.executed.get("mul", 0) for counts in ran.counts] == [0, 0, 1, 0]


@pytest.mark.parametrize("options, kind, line", [
    ({"barrier": False}, "remote_before_barrier", "copy.start()"),
    ({"to": "left"}, "remote_unheard", "copy.start()"),
    ({"wait": "recv"}, "remote_send_not_waited", "copy.start()"),
    # a problem of one device's own (here a semaphore past the end) is the mesh's too
    ({"copies": 2, "recv_sems": True, "slots": 1}, "dma_out_of_bounds", "copy.start()"),
    ({"waits": 2}, "semaphore_never_signalled", "pl.semaphore_wait(sem, waits)"),
    ({"copies": 2}, "remote_overwrite", "copy.start()"),
    ({"copies": 2, "wait": False}, "remote_overwrite", "copy.start()"),
    ({"wait": False}, "dma_not_received", "copy.start()"),
    ({"signals": 2}, "semaphore_left", "pl.semaphore_signal(sem, 1, device_id=(left,))"),
])
def test_a_remote_copy_or_signal_out_of_order_is_named_with_its_line(options, kind, line):
    with pytest.raises(Diagnosed) as failed:
        on_mesh(**options)
    finding = failed.value.findings()[0]
    assert finding.kind == kind
    assert line in dict(finding.facts)["signals" if kind == "semaphore_left" else
                                       "waits" if "wait" in line else "started"]
    if kind == "remote_unheard":   # the barrier heard from the right, the copy goes left
        assert dict(finding.facts)["devices"] == "3 → 2 (left); heard from 0 (right)"


def test_a_barrier_without_a_collective_id_is_named_with_its_line_before_the_run():
    with pytest.raises(Diagnosed) as failed:
        on_mesh(collective_id=None)
    finding = failed.value.findings()[0]
    assert finding.kind == "no_collective_id"
    assert "pltpu.get_barrier_semaphore()" in dict(finding.facts)["barrier"]
    assert "collective_id=0" in finding.says


def test_a_store_into_an_hbm_ref_is_named_with_its_line_before_the_run():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0   # both stay in HBM: only copies reach them

    def call(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                              out_specs=pl.BlockSpec(memory_space=pl.ANY))(x)

    with pytest.raises(Diagnosed) as failed:
        measure(call, np.ones((ROWS, D), np.float32), structure=None)
    finding = failed.value.findings()[0]
    assert finding.kind == "hbm_ref_access"
    assert "o_ref[...] = x_ref[...] + 1.0" in dict(finding.facts)["reads"]


def test_an_error_inside_the_interpreter_is_raised_by_the_run_itself():
    """The run waits for its results: a kernel that fails inside the interpreter's
    callbacks fails the run (the learner's), not the kit's first read of the output."""
    from pytest_pallas_hints import program

    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:DEVICES]), ("x",))
    x = np.ones((DEVICES * ROWS, D), np.float32)
    fn = jax.shard_map(functools.partial(shifted, collective_id=None), mesh=mesh,
                       in_specs=P("x"), out_specs=P("x"), check_vma=False)
    with jax.set_mesh(mesh):
        traced = program.trace(fn, (x,), {})
        with pytest.raises(Exception, match="get_barrier_semaphore|NoneType"):
            program.execute(traced, (x,))
    jaxcompat.reset_interpreter()
    jaxcompat.drop_failed_tokens()


def test_two_copies_on_one_receive_semaphore_are_named_and_one_each_passes():
    """Send semaphores that change from copy to copy while the receive one stays: the
    two are named as swapped."""
    def copies_into_two_windows(x_ref, o_ref, send_sem, recv_sems, *, shared):
        left, right = neighbours("x")
        sem = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(sem, 1, device_id=(left,))
        pl.semaphore_wait(sem, 1)
        for i in range(2):
            half = pl.ds(i * ROWS // 2, ROWS // 2)
            send, recv = send_sem, recv_sems.at[0 if shared else i]
            if shared == "swapped":   # the receive slots in the send place, and back
                send, recv = recv_sems.at[i], send_sem
            copy = pltpu.make_async_remote_copy(
                x_ref.at[half], o_ref.at[half], send, recv, device_id=(right,))
            copy.start()
            copy.wait()

    def call(x, shared):
        return pl.pallas_call(
            functools.partial(copies_into_two_windows, shared=shared),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA((2,))],
            compiler_params=pltpu.CompilerParams(collective_id=0))(x)

    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:DEVICES]), ("x",))
    x = np.ones((DEVICES * ROWS, D), np.float32)
    for shared in (True, "swapped", False):
        fn = jax.shard_map(functools.partial(call, shared=shared), mesh=mesh,
                           in_specs=P("x"), out_specs=P("x"), check_vma=False)
        with jax.set_mesh(mesh):
            if shared:
                with pytest.raises(Diagnosed) as failed:
                    measure(fn, x, structure=None)
                assert failed.value.kind == ("remote_semaphores_swapped" if shared == "swapped"
                                             else "remote_shared_semaphore")
            else:
                assert not measure(fn, x, structure=None).counts[0].dma_problems


HANGS = """
import functools
import jax
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P
from pytest_pallas_hints.checking import measure


def kernel(count_ref, x_ref, o_ref):
    left = lax.rem(lax.axis_index("x") + 3, 4)
    sem = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(sem, 1, device_id=(left,))
    pl.semaphore_wait(sem, count_ref[0])   # 2, and one signal comes
    o_ref[...] = x_ref[...]


def call(count, x):
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec()],
        compiler_params=pltpu.CompilerParams(collective_id=0))(count, x)


def test_hangs():
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:4]), ("x",))
    fn = jax.shard_map(call, mesh=mesh, in_specs=(P(), P("x")), out_specs=P("x"),
                       check_vma=False)
    with jax.set_mesh(mesh):
        ran = measure(fn, np.array([2], np.int32), np.ones((32, 128), np.float32),
                      structure=None)
        np.asarray(ran.output)


def test_after():
    assert True
"""


def test_a_hang_the_ledger_cannot_follow_ends_at_the_time_bound_and_so_does_the_run(kit):
    """The barrier waits for as many signals as an SMEM input says (2; one comes): the
    ledger cannot know the amount, the interpreter waits forever; the time bound fails
    the test, ends the simulated chips' waits, and the process still ends."""
    kit.write("exercises/test_hangs.py", HANGS)
    result = kit.run("exercises/test_hangs.py", "--pallas-timeout=3", "-p", "no:randomly",
                     subprocess=True)
    out = result.stdout.str()
    assert result.ret == 1 and "1 failed, 1 passed" in out, out
    assert "KernelTimeout" in out or "no result after 3 s" in out


def test_a_kernel_in_a_shard_map_multiplies_by_a_mask_as_the_chip_does():
    """NaN * 0 is NaN on a TPU, while XLA on a CPU turns a multiply by a 0/1 mask into a
    select: kernels inside a shard_map run with the chip's multiply, as all others."""
    import jax.numpy as jnp

    def kernel(x_ref, o_ref):
        keep = (lax.broadcasted_iota(jnp.int32, (ROWS, D), 0) < ROWS // 2).astype(jnp.float32)
        o_ref[...] = x_ref[...] * keep

    def call(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:DEVICES]), ("x",))
    fn = jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    x = np.full((DEVICES * ROWS, D), np.nan, np.float32)
    with jax.set_mesh(mesh):
        out = np.asarray(checking.run(fn, x, structure=None))
    assert np.isnan(out).all()
