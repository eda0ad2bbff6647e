"""The kit's support for Mosaic GPU kernels (plgpu.kernel), the hopper chapter's
backend: GPU interpret mode's race reports turned into findings with the learner's
lines, the ledger of asynchronous reads GPU interpret mode cannot see (ordering.py), the
kernel's loops and barriers run on their integers (a wgmma still reading a slot a copy
refills, a deadlock named before it runs, gpu_walk.py),
the structure rules every Mosaic GPU kernel is held to, a kernel waiting on a barrier
nothing completes, and the hardware gating (Hopper, "cannot be verified")."""
import functools
import textwrap
from pathlib import Path

import pytest

from pytest_pallas_hints import diagnose, jaxcompat, ordering, program, runtime, structure

ROOT = Path(__file__).resolve().parent.parent

needs_gpu_interpret = pytest.mark.skipif(
    jaxcompat.gpu_interpret_missing("kernels") is not None,
    reason="cannot be verified on this JAX: no Mosaic GPU interpret mode")


# --- race reports -------------------------------------------------------------------

KERNEL = textwrap.dedent("""\
    def kernel(x_ref, o_ref, tile, landed):
        plgpu.copy_gmem_to_smem(x_ref, tile, landed)
        tile[...] = tile[...] + 1
        plgpu.copy_smem_to_gmem(tile, o_ref)
        o_ref[...] = tile[...]
""")


def access(kind, path, line, column, warpgroup=0, block=0):
    where = f"{path}:{line}:{column} (kernel)" if path else ""
    return (f"  {kind} of HostAllocationKey(memory_space_id=1, device_id=0, block_id=0, "
            f"thread_id=0, initial_ref_count=1, buffer_id=7)[(slice(0, 8, 1), slice(0, 128, "
            f"1))] from Warpgroup(device_id=0, cluster_id=0, block_id={block}, "
            f"warpgroup_id={warpgroup}), {where}\n  clock: <clock>\n")


def explain_race(tmp_path, now, then):
    path = tmp_path / "exercises" / "hopper.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(KERNEL)
    now, then = (access(k, path if line else "", line, col, *rest)
                 for k, line, col, *rest in (now, then))
    error = runtime.RaceDetected([f"RACE DETECTED\n{now}{then}"])
    return diagnose.explain(error, [], tmp_path)


@pytest.mark.parametrize("now, then, kind, lines", [
    (("read", 3, 16), ("write", 2, 4), "race_barrier_wait", [3, 2]),     # read, then copy
    (("read", 4, 4), ("write", 3, 4), "race_commit", [4, 3]),            # copy out, store
    (("write", 0, 0), ("read", 3, 16), "race_refill", [3]),              # a pipeline refill
    (("read", 3, 16, 0), ("write", 2, 4, 1), "race_copy_threads", [2, 3]),
    (("write", 5, 4, 0, 0), ("write", 5, 4, 0, 1), "race_blocks", [5, 5]),
    (("write", 5, 4), ("write", 5, 4), "race_blocks", [5, 5]),           # one name, two blocks
    (("write", 2, 4), ("write", 2, 4), "race_copy_overwrite", [2, 2]),
])
def test_a_gpu_race_report_names_what_is_missing_with_the_learners_lines(
        tmp_path, now, then, kind, lines):
    finding = explain_race(tmp_path, now, then)
    assert finding.kind == kind
    shown = [text for _, text in finding.facts if ".py:" in text]
    assert [int(text.split(".py:")[1].split()[0]) for text in shown] == lines
    assert all(text.startswith("exercises/hopper.py:") for text in shown)


def test_a_tpu_race_report_keeps_the_general_words(tmp_path):
    report = ("RACE DETECTED\n  read of ('vmem', 3) at exercises/basics.py:9:4 (kernel)\n"
              "  write of ('vmem', 3) at exercises/basics.py:8:4 (kernel)\n")
    finding = diagnose.explain(runtime.RaceDetected([report]), [], tmp_path)
    assert finding.kind == "race" and "basics.py:9" in finding.facts[0][1]


# --- programs: structure rules and the ledger ---------------------------------------

def trace(fn, *args):
    with runtime.mosaic_gpu(compiled=False):
        return program.trace(fn, args, {})


def tile_matmul(a, b, *, swizzled=True, acc_dtype="float32", wait_b=True, commit=True,
                stage_a=False):
    """A one-tile wgmma kernel with the knobs the rules are about."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    layout = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128)) if swizzled else ()

    def body(a_ref, b_ref, o_ref, a_tile, b_tile, landed):
        if stage_a:   # a through registers into its tile: a plain store
            a_tile[...] = a_ref[...]
            if commit:
                plgpu.commit_smem()
        else:
            plgpu.copy_gmem_to_smem(a_ref, a_tile, landed.at[0])
            plgpu.barrier_wait(landed.at[0])
        plgpu.copy_gmem_to_smem(b_ref, b_tile, landed.at[1])
        if wait_b:
            plgpu.barrier_wait(landed.at[1])

        def product(acc):
            plgpu.wgmma(acc, a_tile, b_tile)
            return acc[...]

        result = pl.run_scoped(product, plgpu.ACC((64, 64), jnp.dtype(acc_dtype)))
        if not wait_b:
            plgpu.barrier_wait(landed.at[1])
        o_ref[...] = result.astype(o_ref.dtype)

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((64, 64), a.dtype),
                        scratch_types=[plgpu.SMEM((64, 64), a.dtype, transforms=layout),
                                       plgpu.SMEM((64, 64), a.dtype, transforms=layout),
                                       plgpu.Barrier(num_barriers=2)])(a, b)


def rules(traced):
    return structure.check(traced, structure.Structure(backend="mosaic_gpu"))


@needs_gpu_interpret
def test_a_good_tile_matmul_breaks_no_rule():
    import numpy as np

    a = np.zeros((64, 64), np.float16)
    traced = trace(tile_matmul, a, a)
    assert traced.sites[0].call.backend == "mosaic_gpu" and traced.sites[0].call.threads == 1
    assert rules(traced) == [] and ordering.problems(traced.sites[0].call) == []


@needs_gpu_interpret
@pytest.mark.parametrize("knobs, kind", [
    ({"swizzled": False}, "wgmma_layout"),
    ({"acc_dtype": "float16"}, "precision"),
    ({"wait_b": False}, "race_barrier_wait"),
    ({"stage_a": True, "commit": False}, "race_commit"),
])
def test_what_interpret_mode_cannot_see_of_a_wgmma_is_read_from_the_program(knobs, kind):
    import numpy as np

    a = np.zeros((64, 64), np.float16)
    findings = rules(trace(functools.partial(tile_matmul, **knobs), a, a))
    assert findings and findings[0].kind == kind
    if kind.startswith("race"):
        assert any("test_mosaic_gpu.py" in text for _, text in findings[0].facts)


@needs_gpu_interpret
def test_program_id_in_a_gpu_grid_cannot_be_verified_here():
    import jax
    import numpy as np
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    def add_one(x):
        def body(x_ref, o_ref):
            rows = pl.ds(pl.program_id(0) * 8, 8)
            o_ref[rows] = x_ref[rows] + 1

        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                            grid_names=("blocks",))(x)

    from pytest_pallas_hints import jaxcompat

    with pytest.raises(jaxcompat.CannotVerify) as raised:   # right on a GPU: never "wrong"
        rules(trace(add_one, np.zeros((16, 128), np.float32)))
    assert "cannot be verified here" in str(raised.value) \
        and "lax.axis_index" in str(raised.value)


# --- the kernel's loops and barriers, run on their integers (gpu_walk.py) ---------

def pipelined_matmul(a, b, *, wait=0, delay_release=0):
    """A K-pipelined wgmma matmul (one output tile, 4 K steps, 2 in flight) whose body
    ends with plgpu.wgmma_wait(wait) (None: no wait)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    layout = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))

    def body(a_ref, b_ref, o_ref):
        def product(acc):
            def step(indices, a_tile, b_tile):
                plgpu.wgmma(acc, a_tile, b_tile)
                if wait is not None:
                    plgpu.wgmma_wait(wait)

            spec = functools.partial(plgpu.BlockSpec, transforms=layout,
                                     delay_release=delay_release)
            plgpu.emit_pipeline(step, grid=(4,), max_concurrent_steps=2,
                                in_specs=[spec((64, 64), lambda k: (0, k)),
                                          spec((64, 64), lambda k: (k, 0))])(a_ref, b_ref)
            return acc[...]

        o_ref[...] = pl.run_scoped(product, plgpu.ACC((64, 64), jnp.float32)).astype(
            o_ref.dtype)

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((64, 64), a.dtype))(a, b)


@needs_gpu_interpret
@pytest.mark.parametrize("wait, delay_release, refills", [
    (0, 0, False), (None, 0, True), (1, 0, True), (1, 1, False), (None, 1, True)])
def test_a_wgmma_still_reading_a_slot_the_pipeline_refills_is_found(
        wait, delay_release, refills):
    import numpy as np

    from pytest_pallas_hints import gpu_walk

    a = np.zeros((64, 256), np.float16)
    traced = trace(functools.partial(pipelined_matmul, wait=wait,
                                     delay_release=delay_release), a, a.T.copy())
    found = gpu_walk.walk(traced.sites[0].call)
    assert found.wgmmas == {(): 4}   # the work: one wgmma per K step
    assert bool(found.refills) == refills
    kinds = [f.kind for f in rules(traced)]
    assert kinds == (["race_wgmma_refill"] if refills else [])


def producer_consumer(x, *, first_wait=2, release_always=False):
    """Puzzle hopper.warpgroups' shape: a producer warpgroup copies 4 tiles into 2
    slots, a consumer reads them; ``first_wait`` is the first tile for which the
    producer waits for its slot to be released."""
    import jax
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    def body(x_ref, o_ref, tiles, loaded, consumed):
        @pl.when(lax.axis_index("wg") == 1)
        def producer():
            @pl.loop(0, 4)
            def fetch(i):
                @pl.when(i >= first_wait)
                def _():
                    plgpu.barrier_wait(consumed.at[i % 2])

                plgpu.copy_gmem_to_smem(x_ref.at[pl.ds(i * 8, 8)], tiles.at[i % 2],
                                        loaded.at[i % 2])

        @pl.when(lax.axis_index("wg") == 0)
        def consumer():
            @pl.loop(0, 4)
            def compute(i):
                plgpu.barrier_wait(loaded.at[i % 2])
                o_ref[pl.ds(i * 8, 8)] = tiles[i % 2] + 1
                plgpu.commit_smem()

                @pl.when(jax.numpy.logical_or(release_always, i + 2 < 4))
                def _():
                    plgpu.barrier_arrive(consumed.at[i % 2])

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                        num_threads=2, thread_name="wg",
                        scratch_types=[plgpu.SMEM((2, 8, 128), x.dtype),
                                       plgpu.Barrier(num_barriers=2),
                                       plgpu.Barrier(num_barriers=2)])(x)


@needs_gpu_interpret
def test_a_deadlock_is_named_before_the_kernel_runs():
    import numpy as np

    from pytest_pallas_hints import gpu_walk

    x = np.zeros((32, 128), np.float32)
    good = gpu_walk.walk(trace(producer_consumer, x).sites[0].call)
    assert good.stuck == [] and good.unwaited == []
    traced = trace(functools.partial(producer_consumer, first_wait=1), x)
    stuck = gpu_walk.walk(traced.sites[0].call).stuck
    # the producer waits for slot 1's release at tile 1; the consumer for tile 1 to land
    assert sorted((s.thread, s.index, s.needs, s.completions, s.iterations) for s in stuck) == [
        (0, (1,), 1, 0, (1,)), (1, (1,), 1, 0, (1,))]
    findings = rules(traced)
    assert findings[0].kind == "barrier_deadlock"
    assert sum("test_mosaic_gpu.py" in text for _, text in findings[0].facts) == 2


@needs_gpu_interpret
def test_an_arrival_no_wait_observes_is_counted():
    import numpy as np

    from pytest_pallas_hints import gpu_walk

    x = np.zeros((32, 128), np.float32)
    found = gpu_walk.walk(trace(functools.partial(producer_consumer, release_always=True),
                                x).sites[0].call)
    assert [(u.index, u.completions, u.waits) for u in found.unwaited] == [
        ((0,), 2, 1), ((1,), 2, 1)]


@needs_gpu_interpret
def test_control_flow_on_an_unknown_value_gives_no_verdict():
    import jax
    import numpy as np
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    from pytest_pallas_hints import gpu_walk

    def body(x_ref, o_ref, tile, landed):   # whether it waits depends on the data
        plgpu.copy_gmem_to_smem(x_ref, tile, landed)

        @pl.when(x_ref[0, 0] > 0)
        def _():
            plgpu.barrier_wait(landed)

    def copy(x):
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                            scratch_types=[plgpu.SMEM(x.shape, x.dtype), plgpu.Barrier()])(x)

    assert gpu_walk.walk(trace(copy, np.zeros((8, 128), np.float32)).sites[0].call) is None


@needs_gpu_interpret
def test_a_gpu_block_carries_nothing_to_the_next_block():
    """Blocks of a Mosaic GPU grid run in parallel: a later block wrong is an index that
    ignores lax.axis_index, never a state carried between blocks (whatever a block's
    own pipeline carries)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental.pallas import mosaic_gpu as plgpu

    from pytest_pallas_hints.checking import Mismatch, check, measure

    def block_zero_sum(x):   # every block sums block 0's rows: the index map ignores it
        def add(_, tile, total):
            total = total + tile[...]
            plgpu.commit_smem()
            return total

        def body(x_ref, o_ref):
            total = plgpu.emit_pipeline(
                add, grid=(2,),
                in_specs=[plgpu.BlockSpec((None, 64, 128), lambda l: (l, 0, 0))],
                init_carry=jnp.zeros((64, 128), jnp.float32))(x_ref)
            o_ref[pl_rows()] = total

        def pl_rows():
            from jax import lax
            from jax.experimental import pallas as pl
            return pl.ds(lax.axis_index("blocks") * 64, 64)

        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((128, 128), x.dtype),
                            grid=(2,), grid_names=("blocks",))(x)

    x = np.arange(2 * 128 * 128, dtype=np.float32).reshape(2, 128, 128) / 1e4
    with runtime.mosaic_gpu(compiled=False):
        ran = measure(block_zero_sum, x, structure=None)
    with pytest.raises(Mismatch) as failed:
        check(ran, x.sum(0), blocks=(64, None), axes="M D")
    finding = failed.value.findings()[0]
    assert finding.kind == "later_blocks"
    assert "carries" not in finding.says and "index map" in finding.says


# --- running: a barrier nothing completes, hardware gating ---------------------------

@needs_gpu_interpret
def test_a_barrier_nothing_completes_fails_after_the_time_bound():
    import time

    import jax
    import numpy as np
    from jax.experimental.pallas import mosaic_gpu as plgpu

    def body(x_ref, o_ref, never):
        plgpu.barrier_wait(never)
        o_ref[...] = x_ref[...]

    run = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((8, 128), jax.numpy.float32),
                       scratch_types=[plgpu.Barrier()])
    runtime.use_interpret_mode(True)
    started = time.monotonic()
    with pytest.raises(Exception, match="KernelTimeout"):
        with runtime.mosaic_gpu(compiled=False, seconds=3):
            jax.block_until_ready(jax.jit(run)(np.zeros((8, 128), np.float32)))
    assert time.monotonic() - started < 30
    jaxcompat.reset_gpu_interpreter()
    jaxcompat.drop_failed_tokens()
    finding = diagnose.explain(RuntimeError(runtime.GPU_HANG.format(seconds=3)), [], ROOT)
    assert finding.kind == "hang" and "barrier" in finding.says


def test_a_hopper_is_a_gpu_of_compute_capability_9():
    class Device:
        def __init__(self, platform, capability):
            self.platform, self.compute_capability = platform, capability

    assert runtime._is_hopper(Device("cuda", "9.0"))
    assert not runtime._is_hopper(Device("cuda", "8.0"))
    assert not runtime._is_hopper(Device("cuda", "10.0"))
    assert not runtime._is_hopper(Device("cpu", ""))


def test_gpu_tests_of_mosaic_gpu_need_a_hopper(kit, monkeypatch):
    monkeypatch.setenv("PALLAS_HINTS_PLATFORMS", "gpu")
    result = kit.run("exercises/test_hopper.py", "--reference", "-k", "first_kernel and gpu",
                     "-rs")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK and "needs a Hopper GPU" in out


def test_a_jax_without_gpu_interpret_mode_cannot_verify_the_chapter(kit, monkeypatch):
    monkeypatch.setenv(jaxcompat.MISSING_ENV, jaxcompat.GPU_INTERPRET)
    result = kit.run("exercises/test_hopper.py", "--reference", "-k", "first_kernel")
    outcomes = result.parseoutcomes()
    assert result.ret == pytest.ExitCode.OK and "passed" not in outcomes
    assert "cannot be verified on JAX" in " ".join(result.stdout.str().split())


def copies(x, *, read_at=0, view=64, inner=0, write_at=0):
    """Block i of two copies rows [i * read_at + i * inner, +32) of x, through the view
    x_ref.at[i * read_at : + view], into SMEM, and back to o's rows [i * write_at, +32)
    (the offsets are known only once the block is: JAX checks constant ones itself)."""
    import jax
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    def body(x_ref, o_ref, tile, landed):
        i = lax.axis_index("i")
        plgpu.copy_gmem_to_smem(x_ref.at[pl.ds(i * read_at, view)].at[pl.ds(i * inner, 32)],
                                tile, landed)
        plgpu.barrier_wait(landed)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(tile, o_ref.at[pl.ds(i * write_at, 32)])
        plgpu.wait_smem_to_gmem(0)

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                        grid=(2,), grid_names=("i",),
                        scratch_types=[plgpu.SMEM((32, 128), x.dtype), plgpu.Barrier()])(x)


@needs_gpu_interpret
@pytest.mark.parametrize("options, where, operand", [
    ({"read_at": 32, "write_at": 32}, None, None),
    ({"read_at": 64, "view": 32, "inner": 16}, "elements 16..48 along axis 0 of 32", 0),
    ({"read_at": 96}, "elements 96..160 along axis 0 of 128", 0),
    ({"write_at": 112}, "elements 112..144 along axis 0 of 128", 1),
])
def test_a_tma_copy_past_its_ref_or_its_view_is_found(options, where, operand):
    """Inside the whole ref is not enough: an inner .at[...] past the view it indexes
    reads another block's rows on a Hopper (zeros past the ref's end)."""
    import numpy as np

    from pytest_pallas_hints import gpu_walk

    x = np.zeros((128, 128), np.float32)
    found = gpu_walk.walk(trace(functools.partial(copies, **options), x).sites[0].call)
    assert [(o.where, o.operand, o.block) for o in found.outside] == (
        [] if where is None else [(where, operand, {"i": 1})])
