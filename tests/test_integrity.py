"""A verdict means what it says: each structure rule, the work accounting and the
byte accounting, on small kernels, from one trace and one run."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_pallas_hints import Structure, runtime
from pytest_pallas_hints.checking import (Diagnosed, check_structure, check_traffic, check_work,
                                          measure)

F32 = 4


@pytest.fixture(autouse=True, scope="module")
def interpret_mode():
    runtime.use_interpret_mode(True)


@pytest.fixture(autouse=True)
def no_chapter_loaded(monkeypatch):
    """The kernels here live in this file: no chapter file is the learner's."""
    from pytest_pallas_hints import chapters

    monkeypatch.setattr(chapters, "_loaded", set())


def kind_of(fn, *args, structure, **static) -> str:
    """The finding a structure check gives (empty when the structure is right)."""
    try:
        check_structure(fn, *args, structure=structure, **static)
    except Diagnosed as failure:
        return failure.kind
    return ""


def add_one_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def call(kernel, x, grid=(), block=None):
    spec = pl.BlockSpec(block, lambda *i: (i[0] if i else 0, 0)) if block else None
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=grid,
                          **(dict(in_specs=[spec], out_specs=spec) if spec else {}))(x)


X = np.arange(32 * 128, dtype=np.float32).reshape(32, 128)
ADD = Structure(inside={"add"})


# ------------------------------------------------------------ shortcuts ---

def test_the_right_kernel_passes():
    assert kind_of(lambda x: call(add_one_kernel, x, (4,), (8, 128)), X,
                   structure=ADD.where(grid=(4,), blocks={"x": (8, 128)})) == ""


def test_no_kernel_at_all():
    assert kind_of(lambda x: x + 1, X, structure=ADD) == "no_kernel"


def test_a_copy_kernel_with_the_work_done_in_jnp_around_it():
    assert kind_of(lambda x: call(copy_kernel, x) + 1, X, structure=ADD) == "outside"
    assert kind_of(lambda x: call(copy_kernel, x + 1), X, structure=ADD) == "outside"


def test_the_core_operation_must_happen_inside_a_kernel_even_where_jnp_is_allowed():
    structure = ADD.where(outside={"add"})
    assert kind_of(lambda x: call(copy_kernel, x) + 1, X, structure=structure) == "missing_core"


def test_a_decoy_kernel_whose_output_is_thrown_away():
    def decoy(x):
        call(add_one_kernel, x)
        return x + 1

    assert kind_of(decoy, X, structure=ADD.where(outside={"add"})) == "unused_kernel"


def test_an_output_no_kernel_produced():
    def half_done(x):
        return call(add_one_kernel, x), jnp.ones_like(x) * 2

    assert kind_of(half_done, X, structure=ADD) == "not_from_kernel"


def test_a_whole_array_kernel_where_the_lesson_is_the_grid():
    structure = ADD.where(grid=(4,), blocks={"x": (8, 128)})
    assert kind_of(lambda x: call(add_one_kernel, x), X, structure=structure) == "whole_array"


def test_other_blocks_or_another_grid():
    assert kind_of(lambda x: call(add_one_kernel, x, (2,), (16, 128)), X,
                   structure=ADD.where(grid=(4,), blocks={"x": (8, 128)})) == "blocks_shape"
    assert kind_of(lambda x: call(add_one_kernel, x, (4,), (8, 128)), X,
                   structure=ADD.where(grid=(2, 2))) == "grid"


def test_a_grid_finding_names_the_first_axis_that_differs():
    try:
        check_structure(lambda x: call(add_one_kernel, x, (4, 1), (8, 128)), X,
                        structure=ADD.where(grid=(4, 2)))
    except Diagnosed as failure:
        assert failure.findings()[0].detail == "axis1"
    else:
        raise AssertionError("a grid of (4, 1) passed for (4, 2)")


def test_a_grid_axis_sized_at_run_time_is_named_as_such():
    """megablox's grid: the visit axis is a traced number (its num_tiles), shown as None;
    the finding says so ("traced"), not that an axis is in the wrong place."""
    def traced_steps(x, rows):
        steps = jnp.minimum(rows // 8, 4)   # integers only: metadata
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(add_one_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(steps,), in_specs=[spec], out_specs=spec)(x)

    try:
        check_structure(traced_steps, X, np.int32(32),
                        structure=ADD.where(grid=(4,), outside={"metadata"}))
    except Diagnosed as failure:
        assert (failure.kind, failure.findings()[0].detail) == ("grid", "traced")
    else:
        raise AssertionError("a grid sized at run time passed for (4,)")


def test_the_number_of_kernels():
    def twice(x):
        return call(add_one_kernel, call(add_one_kernel, x) - 1)

    assert kind_of(twice, X, structure=ADD.where(outside={"sub"})) == "kernel_count"


def test_a_host_callback_cannot_compute_the_answer():
    def callback(x):
        y = jax.pure_callback(lambda v: v + 1, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return call(copy_kernel, y)

    assert kind_of(callback, X, structure=ADD) == "callback"


def test_jax_own_kernels_cannot_stand_in():
    from jax.experimental.pallas.ops.tpu import matmul as jax_matmul

    a = np.ones((128, 128), np.float32)
    mm = Structure(inside={"dot_general"})
    assert kind_of(lambda a, b: jax_matmul.matmul(a, b, block_shape=(128, 128), block_k=128),
                   a, a, structure=mm) == "foreign_kernel"

    def wrapped(a, b):  # the learner's own pallas_call around JAX's kernel body
        return pl.pallas_call(jax_matmul.matmul_kernel, out_shape=jax.ShapeDtypeStruct(
            a.shape, a.dtype), scratch_shapes=[pltpu.VMEM(a.shape, jnp.float32)], grid=(1, 1, 1),
            in_specs=[pl.BlockSpec(a.shape, lambda i, j, k: (0, 0))] * 2,
            out_specs=pl.BlockSpec(a.shape, lambda i, j, k: (0, 0)))(a, b)

    assert kind_of(wrapped, a, a, structure=mm) == "foreign_kernel"


def test_a_kernel_from_a_file_that_is_not_a_chapter(monkeypatch):
    from pytest_pallas_hints import chapters, structure

    traced = __import__("pytest_pallas_hints.program", fromlist=["trace"]).trace(
        lambda x: call(add_one_kernel, x), (X,), {})
    findings = structure.check(traced, ADD, sources={chapters.Path("/elsewhere/basics.py")})
    assert findings[0].kind == "foreign_kernel" and "test_integrity.py" in findings[0].says


def test_scalar_prefetch_where_the_lesson_is_scalar_prefetch():
    assert kind_of(lambda x: call(add_one_kernel, x), X,
                   structure=ADD.where(prefetch=True)) == "no_prefetch"


def test_a_learner_who_detects_the_harness_still_runs_no_kernel():
    import inspect

    def detector(x):
        if any("pytest_pallas_hints" in frame.filename for frame in inspect.stack()):
            return x + 1
        return call(add_one_kernel, x)

    assert kind_of(detector, X, structure=ADD) == "no_kernel"


# ----------------------------------------------------------------- work ---

def masked_matmul(a, b, *, visit):
    """A (2, 2, 2) matmul grid whose dot runs only where visit(i, j, k)."""
    def kernel(a_ref, b_ref, o_ref, acc_ref):
        i, j, k = pl.program_id(0), pl.program_id(1), pl.program_id(2)

        @pl.when(k == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        @pl.when(visit(i, j, k))
        def _():
            acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

        o_ref[...] = acc_ref[...]

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((16, 256), a.dtype), grid=(2, 2, 2),
        in_specs=[pl.BlockSpec((8, 128), lambda i, j, k: (i, k)),
                  pl.BlockSpec((128, 128), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((8, 128), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])(a, b)


A, B = np.ones((16, 256), np.float32), np.ones((256, 256), np.float32)
ONE_DOT = 2 * 8 * 128 * 128


@pytest.mark.parametrize("visit, dots", [
    (lambda i, j, k: True, 8),
    (lambda i, j, k: k <= i, 6),
    (lambda i, j, k: j == 5, 0),
])
def test_work_counts_the_dots_a_pl_when_lets_run(visit, dots):
    ran = measure(masked_matmul, A, B, visit=visit, structure=None)
    assert ran.work == dots * ONE_DOT
    check_work(ran, flops=dots * ONE_DOT)


def test_more_work_than_needed_is_named():
    ran = measure(masked_matmul, A, B, visit=lambda i, j, k: True, structure=None)
    with pytest.raises(Diagnosed) as failure:
        check_work(ran, flops=6 * ONE_DOT, likely={"every_block": 8 * ONE_DOT})
    assert failure.value.kind == "every_block"
    with pytest.raises(Diagnosed) as failure:
        check_work(ran, flops=6 * ONE_DOT)
    assert failure.value.kind == "work_high"


def loop_kernel(n_ref, x_ref, o_ref):
    """fori_loop bounds from a grid index and from a prefetched scalar."""
    def body(t, acc):
        return acc + jnp.dot(x_ref[...], x_ref[...], preferred_element_type=jnp.float32)

    first = jax.lax.fori_loop(0, pl.program_id(0) + 1, body, jnp.zeros((128, 128), jnp.float32))
    o_ref[...] = jax.lax.fori_loop(0, n_ref[pl.program_id(0)], body, first)


def looped(n, x):
    return pl.pallas_call(loop_kernel, out_shape=jax.ShapeDtypeStruct((2, 128, 128), x.dtype),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=1, grid=(2,),
                              in_specs=[pl.BlockSpec((128, 128), lambda i, n: (0, 0))],
                              out_specs=pl.BlockSpec((None, 128, 128), lambda i, n: (i, 0, 0))))(
        n, x)


def test_work_follows_loop_bounds_from_grid_indices_and_prefetched_scalars():
    n = np.array([3, 0], np.int32)
    ran = measure(looped, n, np.ones((128, 128), np.float32), structure=None)
    # step 0: 1 + 3 dots; step 1: 2 + 0
    assert ran.work == 6 * 2 * 128 ** 3


def test_a_condition_on_loaded_data_cannot_be_counted():
    def kernel(x_ref, o_ref):
        @pl.when(x_ref[0, 0] > 0)
        def _():
            o_ref[...] = jnp.dot(x_ref[...], x_ref[...])

    x = np.ones((128, 128), np.float32)
    ran = measure(lambda x: call(kernel, x), x, structure=None)
    with pytest.raises(Diagnosed) as failure:
        ran.work
    assert failure.value.kind == "uncountable"


# ---------------------------------------------------------------- bytes ---

def test_bytes_are_two_sided():
    def ignores_x(x):  # reads only the first block of x, whatever the grid
        spec = pl.BlockSpec((8, 128), lambda i: (0, 0))
        return pl.pallas_call(add_one_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(4,), in_specs=[spec],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)

    ran = measure(ignores_x, X, structure=None)
    assert ran.traffic.read == 8 * 128 * F32
    with pytest.raises(AssertionError, match="minimum"):
        check_traffic(ran, reference=2 * X.nbytes, minimum=2 * X.nbytes)
    check_traffic(measure(lambda x: call(add_one_kernel, x, (4,), (8, 128)), X,
                          structure=None), reference=2 * X.nbytes, minimum=2 * X.nbytes)


def test_value_work_and_bytes_come_from_one_run(monkeypatch):
    from pytest_pallas_hints import program

    runs = []
    original = program.execute_perturbable
    monkeypatch.setattr(program, "execute_perturbable",
                        lambda *a: runs.append(1) or original(*a))
    traced = []
    ran = measure(functools.partial(masked_matmul, visit=lambda i, j, k: traced.append(1) or True),
                  A, B, structure=Structure(inside={"dot_general"}))
    assert (ran.work, ran.traffic.total) and len(runs) == 1 and len(traced) == 1
    np.testing.assert_array_equal(ran.output, A @ B)


def test_a_reduction_axis_marked_parallel_is_named():
    def summed(x, semantics):
        def kernel(x_ref, o_ref):
            @pl.when(pl.program_id(1) == 0)
            def _():
                o_ref[...] = jnp.zeros_like(o_ref)

            o_ref[...] += x_ref[...]

        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype),
                              grid=(1, 4), in_specs=[pl.BlockSpec((8, 128), lambda i, k: (0, k))],
                              out_specs=pl.BlockSpec((8, 128), lambda i, k: (0, 0)),
                              compiler_params=pltpu.CompilerParams(dimension_semantics=semantics)
                              )(x)

    x = np.ones((8, 512), np.float32)
    assert kind_of(summed, x, semantics=("parallel", "parallel"), structure=ADD) == \
        "parallel_reduction"
    assert kind_of(summed, x, semantics=("parallel", "arbitrary"), structure=ADD) == ""
