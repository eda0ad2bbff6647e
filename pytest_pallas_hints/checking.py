"""What test files call: ``run`` a learner function, ``check`` its output, check
that it ``lowers_for_tpu``, ``check_traffic``, ``fail`` with a finding of a
test's own, and draw seeded inputs from ``Rng``.

``check`` does not print; it raises ``Mismatch``, an ``AssertionError`` that
carries both arrays, so the plugin can say *how* they differ (shape, NaN,
which blocks, a constant factor, a known wrong answer) instead of dumping
numbers.
"""
from __future__ import annotations

import functools
import zlib
from typing import Callable, Mapping, NoReturn

import numpy as np

from . import diagnose, runtime
from .chapters import ChapterImportError

# (rtol, atol relative to the largest |expected|) per dtype of the expected output.
TOLERANCE = {"float64": 1e-9, "float32": 2e-5, "float16": 2e-3, "bfloat16": 2e-2}


class Mismatch(AssertionError):
    """An output that differs from the expected one; ``findings()`` says how."""

    def __init__(self, yours, expected, *, name: str, blocks, axes, likely, tolerance: float):
        self.yours, self.expected = yours, expected
        self.name, self.blocks, self.axes, self.tolerance = name, blocks, axes, tolerance
        self._likely = likely
        super().__init__(f"{name} differs from the expected value")

    def findings(self) -> list[diagnose.Finding]:
        likely = {k: np.asarray(v() if callable(v) else v) for k, v in (self._likely or {}).items()}
        return diagnose.compare(self.yours, self.expected, name=self.name, blocks=self.blocks,
                                axes=self.axes, likely=likely, tolerance=self.tolerance)

    def __str__(self) -> str:
        return "\n".join(diagnose.render(self.findings()))


class Diagnosed(AssertionError):
    """A failure a test explains itself: a finding kind (hints files attach their
    words to it), the engine-style sentence, and the facts it rests on."""

    def __init__(self, kind: str, says: str, facts=()):
        super().__init__(says)
        self.kind, self.says, self.facts = kind, says, list(facts)

    def findings(self) -> list[diagnose.Finding]:
        return [diagnose.Finding(self.kind, self.says, facts=self.facts)]


def fail(kind: str, says: str, facts=()) -> NoReturn:
    """Fails the test with a finding of its own, e.g. a rule a learner's choice broke:
    ``fail("vmem_budget", "your blocks do not fit", [("vmem", "18 MiB > 16 MiB")])``."""
    raise Diagnosed(kind, says, facts)


class TooMuchTraffic(AssertionError):
    """A kernel that moves more bytes between HBM and VMEM than its budget."""

    def __init__(self, yours, reference: int, minimum: int | None, outside: int | None = None):
        self.yours, self.reference, self.minimum, self.outside = yours, reference, minimum, outside
        super().__init__(f"bytes moved: yours {yours.total} (+ {yours.outside} outside "
                         f"kernels) > reference {reference}")

    def findings(self) -> list[diagnose.Finding]:
        from .traffic import mib

        sizes = [self.yours.total, self.reference] + (
            [self.minimum] if self.minimum is not None else [])
        shown = mib(*sizes)
        moved = f"yours {shown[0]} · reference {shown[1]}" + (
            f" · minimum {shown[2]}" if len(shown) > 2 else "")
        facts = [("bytes", f"moved by kernels: {moved}")]
        if self.outside is not None and self.yours.outside > self.outside:
            facts.append(("outside", f"plus {mib(self.yours.outside)} by JAX ops outside "
                                     f"your kernels: {_biggest(self.yours.outside_ops, mib)}"))
            return [diagnose.Finding("traffic", (
                "part of the work happens outside your kernels, in separate JAX ops "
                "that each read and write HBM: move it into the kernel, so the data "
                "makes one trip."), facts=facts)]
        per_kernel: dict[str, int] = {}
        for op in self.yours.operands:
            per_kernel[op.kernel] = per_kernel.get(op.kernel, 0) + op.bytes
        if len(per_kernel) > 1:
            facts.append(("kernels", " · ".join(
                f"{k} {v}" for k, v in zip(per_kernel, mib(*per_kernel.values())))))
        worst = max(self.yours.operands, key=lambda o: o.bytes / max(o.array_bytes, 1))
        times = worst.bytes / max(worst.array_bytes, 1)
        if times > 1.01:
            facts.append(("most", f"{worst.name} in {worst.kernel}: {worst.direction} "
                                  f"{mib(worst.bytes)} in {worst.copies} copies, "
                                  f"{times:.3g} × its size"))
            says = (f"{worst.name} moves {times:.3g} times its size: keep a block in VMEM "
                    "while it is needed (its index map returns the same block on "
                    "consecutive steps), or choose blocks that reuse it more.")
        else:
            says = ("more data moves than the work needs: an intermediate result makes a "
                    "round trip through HBM? Fuse the steps into one kernel.")
        return [diagnose.Finding("traffic", says, facts=facts)]


def check_traffic(yours, *, reference: int, minimum: int | None = None,
                  outside: int | None = None) -> None:
    """Passes if ``yours`` (from ``moved_bytes``) moves at most ``reference`` bytes.

    reference: the bytes a good solution's kernels move (computed by hand in the test);
    minimum:   every input read once and every output written once, for scale;
    outside:   if given, the most bytes JAX ops outside the kernels may move (0: all
               the work must happen in kernels).
    """
    if yours.total > reference or (outside is not None and yours.outside > outside):
        raise TooMuchTraffic(yours, reference, minimum, outside)


class LoweringFailed(AssertionError):
    """The kernel runs in interpret mode but would not compile for a TPU."""

    def __init__(self, error: BaseException):
        self.error = error
        super().__init__(f"does not lower for TPU: {error}")


def check(yours, expected, *, blocks=None, axes: str | None = None,
          likely: Mapping[str, object] | None = None, tolerance: float | None = None,
          name: str = "output") -> None:
    """Passes if ``yours`` has the shape, dtype and values of ``expected``.

    blocks:    the output's block shape (None for a full dim), for the block map;
    axes:      a letter per output dim for the block map's labels, e.g. "B N T H";
    likely:    known wrong answers, name -> array (or a function returning one,
               evaluated only on failure); a match is named by the puzzle's words;
    tolerance: relative tolerance, default by dtype (TOLERANCE).
    """
    yours_np, expected_np = np.asarray(yours), np.asarray(expected)
    if tolerance is None:
        tolerance = TOLERANCE.get(expected_np.dtype.name, 0.0)
    if (yours_np.shape == expected_np.shape and yours_np.dtype == expected_np.dtype
            and diagnose.close(yours_np, expected_np, tolerance).all()):
        return
    raise Mismatch(yours_np, expected_np, name=name, blocks=blocks, axes=axes,
                   likely=likely, tolerance=tolerance)


def run(fn: Callable, *args, **static):
    """``fn(*args, **static)`` compiled as one program (keyword arguments static),
    which must run at least one Pallas kernel.

    One compilation for the wrapper and its kernels is much faster in
    interpret mode than running the wrapper's operations one by one.
    """
    return _run(fn, args, static, kernel=True, fused=False)


def run_fused(fn: Callable, *args, **static):
    """As ``run``, and all the work must happen inside the kernels: plain JAX ops
    around them may only reshape (a learner who computes the answer outside the
    kernel fails with the finding ``outside``)."""
    return _run(fn, args, static, kernel=True, fused=True)


def run_jax(fn: Callable, *args, **static):
    """``fn(*args, **static)`` compiled as one program, no kernel required (for
    the puzzles written in plain JAX)."""
    return _run(fn, args, static, kernel=False, fused=False)


def _run(fn, args, static, *, kernel: bool, fused: bool):
    import jax

    from .traffic import mib, survey

    traced = jax.jit(functools.partial(fn, **static)).trace(*args)
    if kernel:
        kernels, outside, _ = survey(traced.jaxpr.jaxpr)
        if not kernels:
            fail("no_kernel", "your function computes its result without a Pallas kernel: "
                              "the work of this puzzle belongs in a pl.pallas_call.")
        if fused and outside:
            fail("outside", (
                "part of the work happens outside your kernel, in plain JAX ops that each "
                "read and write HBM: do it inside the kernel, where the data already is."),
                [("outside", _biggest(outside, mib))])
    return traced.lower().compile()(*args)


def _biggest(ops, mib, shown: int = 3) -> str:
    """'add 96 KiB · broadcast_in_dim 33 KiB': the ops that moved the most."""
    ops = sorted(ops, key=lambda o: -o.bytes)
    text = " · ".join(f"{o.name} {mib(o.bytes)}" for o in ops[:shown])
    return text + (f" and {len(ops) - shown} more" if len(ops) > shown else "")


def lowers_for_tpu(fn: Callable, *args, **static) -> None:
    """Passes if ``fn(*args, **static)`` lowers for a real TPU (Mosaic), on this machine.

    ``jax.jit(fn).trace(*args).lower(lowering_platforms=("tpu",))`` runs the
    real TPU compiler front end on CPU: it rejects, for example, block shapes
    whose last two dims are not multiples of (8, 128).
    """
    import jax

    from . import compile_cache

    with runtime.compiled_for_tpu():
        try:
            traced = jax.jit(functools.partial(fn, **static)).trace(*args)
            mark = compile_cache.passed_before("lowers_for_tpu", traced.jaxpr)
            if mark is not None and mark.exists():
                return  # this exact program lowered in an earlier run
            traced.lower(lowering_platforms=("tpu",))
            compile_cache.record(mark)
        except (NotImplementedError, AssertionError, ChapterImportError):
            raise
        except Exception as error:
            if "Unsupported TPU device kind" in str(error):
                return  # a rule this JAX can only check on a real TPU
            raise LoweringFailed(error) from error


class Rng:
    """Seeded NumPy inputs for one test; the seed is printed when the test fails."""

    def __init__(self, seed: int):
        self.seed = seed
        self._gen = np.random.default_rng(seed)

    @classmethod
    def for_test(cls, test_name: str) -> "Rng":
        return cls(zlib.crc32(test_name.encode()) % 10_000)

    def normal(self, shape, dtype="float32", scale: float = 1.0) -> np.ndarray:
        return _as(self._gen.standard_normal(shape) * scale, dtype)

    def uniform(self, shape, low: float = 0.0, high: float = 1.0, dtype="float32"):
        return _as(self._gen.uniform(low, high, shape), dtype)

    def integers(self, shape, low: int, high: int, dtype="int32"):
        return _as(self._gen.integers(low, high, shape), dtype)


def _as(values, dtype) -> np.ndarray:
    import jax.numpy as jnp  # knows "bfloat16"

    return np.asarray(values).astype(jnp.dtype(dtype))
