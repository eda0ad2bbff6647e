"""Hardware detection and the simulated TPU that runs kernels on a laptop.

Where no TPU is present every kernel runs in Pallas's TPU interpret mode, set
once for the whole process, so learner code calls ``pl.pallas_call`` with no
``interpret=`` argument exactly as on a TPU. The interpreter is configured to
make the bugs that are silent on hardware loud on a laptop:

* ``detect_races``: a read and a write of one buffer that nothing orders (a
  DMA destination read before its ``wait()``) is reported;
* ``uninitialized_memory="nan"``: scratch and output buffers start as NaN,
  so a missing initialisation poisons the result instead of reading zeros;
* ``out_of_bounds_reads="raise"``: an index map pointing past the array is
  an error, not garbage.

XLA's optimisation passes are switched off alongside: compile time dominates
a test in interpret mode.

``watch`` wraps one test: it turns a race into a failure naming both source
lines, and a kernel that waits forever into a failure after a time bound.
Nothing here imports JAX at module import time (``pytest --help`` stays fast).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

# Lets the kit's own tests pretend a TPU or GPU is present: "tpu", "gpu", "cpu".
PLATFORM_OVERRIDE_ENV = "PALLAS_HINTS_PLATFORMS"


class RaceDetected(AssertionError):
    """Two accesses to one buffer, at least one a write, not ordered."""

    def __init__(self, reports: list[str]):
        self.reports = reports
        super().__init__("race detected\n" + "\n".join(reports))


class KernelTimeout(Exception):
    """The test ran past its time bound (raised from a SIGALRM handler)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        super().__init__(f"KernelTimeout: no result after {seconds:g} s")


def platforms() -> frozenset[str]:
    """The accelerator kinds present: a subset of {"tpu", "gpu", "cpu"}.

    The plugin asks once per session; the override lets the kit's own tests
    pretend hardware is there.
    """
    override = os.environ.get(PLATFORM_OVERRIDE_ENV)
    if override:
        return frozenset(p.strip() for p in override.split(",") if p.strip())
    import jax

    kinds = {d.platform for d in jax.devices()}
    return frozenset("gpu" if k in ("cuda", "rocm") else k for k in kinds)


def interpret_params():
    from jax.experimental.pallas import tpu as pltpu

    return pltpu.InterpretParams(
        detect_races=True,
        uninitialized_memory="nan",
        out_of_bounds_reads="raise",
    )


def use_interpret_mode(on: bool) -> None:
    """Sets (or clears) TPU interpret mode for the whole process.

    With it, XLA's optimisations are off: an interpret-mode program runs once,
    on small inputs, and compiling it is most of a test's time.
    """
    import jax
    from jax.experimental.pallas import tpu as pltpu

    pltpu.set_tpu_interpret_mode(interpret_params() if on else None)
    jax.config.update("jax_disable_most_optimizations", on)


@contextlib.contextmanager
def compiled_for_tpu():
    """Inside: pallas_call lowers for a real TPU (a v5e, as far as the lowering asks)
    even on a CPU and where interpret mode is set."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    chip = contextlib.nullcontext()
    if hasattr(jax.sharding, "AbstractDevice"):  # rules that depend on the TPU generation
        try:
            device = jax.sharding.AbstractDevice(device_kind="TPU v5 lite", num_cores=1,
                                                 platform="tpu")
        except TypeError:  # JAX < 0.9 has no platform field
            device = jax.sharding.AbstractDevice(device_kind="TPU v5 lite", num_cores=1)
        chip = jax.sharding.use_abstract_mesh(
            jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device))
    with pltpu.force_tpu_interpret_mode(None), chip:
        yield


@contextlib.contextmanager
def watch(seconds: float):
    """Runs one test: fails it on a race, or after ``seconds`` without a result."""
    __tracebackhide__ = True
    _reset_interpreter()
    with _recording_races() as races, _time_limit(seconds):
        try:
            yield
        except BaseException:
            _reset_interpreter()  # a failed kernel leaves the simulated TPU dirty
            _drop_failed_tokens()
            if races:
                raise RaceDetected(races) from None
            raise
    if not races and _interpreter_saw_race():
        races.append("a race (the interpreter did not say where)")
    if races:
        raise RaceDetected(races)


def _reset_interpreter() -> None:
    if "jax" not in sys.modules:
        return
    from jax.experimental.pallas import tpu as pltpu

    pltpu.reset_tpu_interpret_mode_state()


def _drop_failed_tokens() -> None:
    """Forgets the effect tokens of a computation that failed mid-kernel.

    Otherwise JAX hands the failed token to the next computation with the same
    side effects (the next test's kernel fails for no reason of its own) and
    waits on it at exit (a long traceback after the summary).
    """
    from jax._src import dispatch

    tokens = getattr(dispatch, "runtime_tokens", None)
    if tokens is not None and hasattr(tokens, "clear"):
        tokens.clear()


@contextlib.contextmanager
def _recording_races():
    """Collects the interpreter's race reports, which it prints, into a list."""
    found: list[str] = []
    try:
        from jax._src.pallas.mosaic.interpret import race_detection_state as detector
    except ImportError:  # a JAX that moved it: fall back to the races_found flag
        yield found
        return

    def record(*args, **kwargs):
        found.append(" ".join(str(a) for a in args).strip())

    previous = vars(detector).get("print")
    detector.print = record  # the detector reports each race with print()
    try:
        yield found
    finally:
        if previous is None:
            del detector.print
        else:
            detector.print = previous


def _interpreter_saw_race() -> bool:
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call
    except ImportError:
        return False
    races = getattr(interpret_pallas_call, "races", None)
    return bool(races is not None and races.races_found)


@contextlib.contextmanager
def _time_limit(seconds: float):
    usable = (seconds and seconds > 0 and hasattr(signal, "SIGALRM")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        raise KernelTimeout(seconds)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
