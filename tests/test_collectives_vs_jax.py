"""reference/collectives.py against jax.lax's collectives and JAX's own ring all-gather
Pallas kernel (jax.experimental.pallas.ops.tpu.all_gather), on rings of 2 to 8 simulated
chips, all in TPU interpret mode.

* ring_shift, all_gather: exactly lax.ppermute and lax.all_gather(tiled=True), for
  shards of several shapes and dtypes (one row, odd widths, bf16, int32);
* reduce_scatter, all_reduce: lax.psum_scatter(tiled=True) and lax.psum to float32
  rounding (the ring adds in another order: within 1e-5 of the largest sum);
* all_gather_matmul: lax.all_gather then a float32 matmul;
* shift_add (a pl.kernel over a TensorCoreMesh): x + lax.ppermute(x), exactly;
* JAX's all-gather kernel, where it accepts the shapes (an even number of rows: it
  sends half of each shard each way round the ring), gathers the same array as ours.
  Its two directions reuse one receive semaphore per direction from step to step; the
  kit's ledger names that (a copy that may land while the previous one is unwaited),
  and with the interpreter's default schedule (a copy runs when a wait needs it, the
  latest first) it can indeed pass on a half-shard that has not landed; so it runs
  here directly, without the ledger or race detection, its copies executed in order;
* every case moves exactly the ring's bytes between chips.
"""
import functools
import importlib.util
from pathlib import Path

import jax
import numpy as np
import pytest
from jax import lax
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

from pytest_pallas_hints import jaxcompat, runtime
from pytest_pallas_hints.checking import Diagnosed, measure

ROOT = Path(__file__).resolve().parent.parent


def load_reference():
    path = ROOT / "reference" / "collectives.py"
    spec = importlib.util.spec_from_file_location("reference_collectives", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


collectives = load_reference()


@pytest.fixture(autouse=True)
def interpret_mode():
    """TPU interpret mode for every kernel here, as the plugin sets it for learners."""
    if jaxcompat.cpu_devices_missing(8):
        pytest.skip(jaxcompat.cpu_devices_missing(8))
    jaxcompat.require("remote DMAs")
    runtime.use_interpret_mode(True)


def mesh_of(n):
    return jax.sharding.Mesh(np.array(jax.devices("cpu")[:n]), ("x",))


def both(mesh, ours, theirs, *args, in_specs=P("x"), out_specs=P("x")):
    """(ours, measured once by the kit; jax.lax's) on every device of the mesh."""
    def sharded(fn, check_vma):
        return jax.shard_map(functools.partial(fn, axis_name="x"), mesh=mesh,
                             in_specs=in_specs, out_specs=out_specs, check_vma=check_vma)

    with jax.set_mesh(mesh):
        ran = measure(sharded(ours, False), *args, structure=None)
        ran.output.block_until_ready()   # (JAX 0.8: XLA's own collectives would wait
        expected = jax.jit(sharded(theirs, True))(*args)   # for the interpreter's threads)
    return ran, np.asarray(expected)


def draw(seed, shape, dtype):
    gen = np.random.default_rng(seed)
    if dtype == "int32":
        return gen.integers(-1000, 1000, shape).astype(np.int32)
    return gen.standard_normal(shape).astype(jax.numpy.dtype(dtype))


@pytest.mark.parametrize("n, shard, dtype", [
    (2, (1, 128), "float32"), (4, (3, 7), "int32"), (8, (16, 128), "bfloat16"),
    (4, (2, 8, 128), "float32"),
])
def test_ring_shift_and_all_gather_are_lax_exactly(n, shard, dtype):
    mesh = mesh_of(n)
    x = draw(n, (n * shard[0], *shard[1:]), dtype)
    perm = [(i, (i + 1) % n) for i in range(n)]
    ran, expected = both(mesh, collectives.ring_shift,
                         lambda x, axis_name: lax.ppermute(x, axis_name, perm), x)
    np.testing.assert_array_equal(np.asarray(ran.output), expected)
    assert ran.remote_bytes == x.nbytes
    ran, expected = both(mesh, collectives.all_gather,
                         lambda x, axis_name: lax.all_gather(x, axis_name, tiled=True), x)
    np.testing.assert_array_equal(np.asarray(ran.output), expected)
    assert ran.remote_bytes == (n - 1) * x.nbytes


@pytest.mark.parametrize("n, shard, dtype", [
    (2, (1, 128), "float32"), (4, (3, 7), "int32"), (8, (16, 128), "bfloat16"),
])
def test_shift_add_as_a_pl_kernel_is_x_plus_lax_ppermute(n, shard, dtype):
    """The pl.kernel (TensorCoreMesh) puzzle: x + ppermute(x) exactly (one addition,
    rounded once in x's dtype, as XLA's), one shard sent per chip."""
    jaxcompat.require("pl.kernel over a TensorCoreMesh")
    mesh = mesh_of(n)
    x = draw(n, (n * shard[0], *shard[1:]), dtype)
    perm = [(i, (i + 1) % n) for i in range(n)]
    ran, expected = both(mesh, collectives.shift_add,
                         lambda x, axis_name: x + lax.ppermute(x, axis_name, perm), x)
    assert ran.program.sites[0].call.api == "pl.kernel"
    np.testing.assert_array_equal(np.asarray(ran.output), expected)
    assert ran.remote_bytes == x.nbytes


@pytest.mark.parametrize("n, block, dtype", [
    (2, (8, 128), "float32"), (4, (16, 256), "bfloat16"), (8, (8, 128), "float32"),
])
def test_reduce_scatter_and_all_reduce_are_lax_to_float32_rounding(n, block, dtype):
    mesh = mesh_of(n)
    x = draw(10 + n, (n * n * block[0], *block[1:]), dtype)
    for ours, theirs, moved in [
        (collectives.reduce_scatter,
         lambda x, axis_name: lax.psum_scatter(x.astype(np.float32), axis_name,
                                               tiled=True).astype(x.dtype),
         n * (n - 1) * int(np.prod(block)) * 4),
        (collectives.all_reduce,
         lambda x, axis_name: lax.psum(x.astype(np.float32), axis_name).astype(x.dtype),
         n * (n - 1) * int(np.prod(block)) * (4 + x.itemsize)),
    ]:
        ran, expected = both(mesh, ours, theirs, x)
        yours = np.asarray(ran.output).astype(np.float64)
        scale = np.abs(expected.astype(np.float64)).max()
        tolerance = 1e-5 if dtype == "float32" else 1e-2
        assert np.abs(yours - expected.astype(np.float64)).max() <= tolerance * scale
        assert ran.remote_bytes == moved


# (Eight chips keep small blocks: JAX 0.8's CPU runtime stalls when eight devices' kernel
# threads all wait in the interpreter with larger buffers in flight.)
@pytest.mark.parametrize("n, M, K, F", [(2, 8, 256, 128), (8, 8, 128, 128)])
def test_all_gather_matmul_is_the_gather_then_the_matmul(n, M, K, F):
    mesh = mesh_of(n)
    x, w = draw(n, (n * M, K), "float32"), draw(n + 1, (K, F), "float32") / K ** 0.5

    def theirs(x, w, axis_name):
        return jax.numpy.dot(lax.all_gather(x, axis_name, tiled=True), w,
                             precision=lax.Precision.HIGHEST)

    ran, expected = both(mesh, collectives.all_gather_matmul, theirs, x, w,
                         in_specs=(P("x"), P()))
    np.testing.assert_allclose(np.asarray(ran.output), expected, rtol=1e-5,
                               atol=1e-5 * np.abs(expected).max())
    assert ran.remote_bytes == n * (n - 1) * M * K * 4
    assert sum(c.overlapped.get("dot_general", 0) for c in ran.counts) == n * (n - 1)


def jax_all_gather():
    """JAX's ring all-gather kernel, where this JAX's interpret mode can run it (JAX
    0.8's cannot: its remote copies name devices by a dict)."""
    from jax.experimental.pallas.ops.tpu import all_gather

    if jaxcompat._release(jaxcompat.jax_version()) < (0, 9):
        pytest.skip(f"JAX {jaxcompat.jax_version()}'s interpret mode cannot run JAX's "
                    "all-gather kernel (its device ids are dicts)")
    return all_gather.all_gather


@pytest.mark.parametrize("n, shard, dtype", [
    (2, (8, 128), "float32"), (4, (16, 128), "bfloat16"), (8, (8, 128), "float32"),
])
def test_ours_gathers_what_jaxs_own_all_gather_kernel_gathers(n, shard, dtype):
    theirs = jax_all_gather()
    mesh = mesh_of(n)
    x = draw(20 + n, (n * shard[0], *shard[1:]), dtype)
    # Copies executed as they start (in order): with the interpreter's default, a copy
    # runs when a wait needs its semaphore, the latest first, and JAX's kernel may pass
    # on a half-shard that has not landed (the shared semaphore the ledger names).
    quiet = pltpu.InterpretParams(detect_races=False, uninitialized_memory="nan",
                                  dma_execution_mode="eager")
    with jax.set_mesh(mesh), pltpu.force_tpu_interpret_mode(quiet):
        gathered = np.asarray(theirs(jax.device_put(x, jax.sharding.NamedSharding(
            mesh, P("x"))), mesh=mesh, axis_name="x"))
    ran, _ = both(mesh, collectives.all_gather,
                  lambda x, axis_name: lax.all_gather(x, axis_name, tiled=True), x)
    np.testing.assert_array_equal(gathered, np.asarray(ran.output)[:n * shard[0]])
    np.testing.assert_array_equal(gathered, x)


def test_the_ledger_names_the_shared_receive_semaphore_of_jaxs_kernel():
    """JAX's kernel sends its next half-shard each way as soon as its own last copy is
    waited, onto the same receive semaphore: a copy that may land before the neighbour
    waited for the last one (the interpreter can report it as a race)."""
    from jax.experimental.pallas.ops.tpu import all_gather

    mesh = mesh_of(4)
    x = draw(7, (4 * 8, 128), "float32")
    sharded = jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x")))
    with jax.set_mesh(mesh), pytest.raises(Diagnosed) as found:
        measure(functools.partial(all_gather.all_gather, mesh=mesh, axis_name="x"), sharded,
                structure=None)
    assert found.value.kind == "remote_shared_semaphore"
