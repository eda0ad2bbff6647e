"""Hardware detection and the simulated TPU that runs kernels on a laptop.

Where no TPU is present every kernel runs in Pallas's TPU interpret mode, set
once for the whole process, so learner code calls ``pl.pallas_call`` with no
``interpret=`` argument exactly as on a TPU. The interpreter is configured to
make the bugs that are silent on hardware loud on a laptop
(``jaxcompat.interpret_params``): races reported, fresh buffers NaN,
out-of-bounds reads an error.

Verdicts are the same on every machine: where JAX's default device is a GPU,
everything but ``gpu``-marked tests runs on the CPU (a GPU would compute the
plain-JAX expected values with TF32 matmuls, and interpret mode has nothing to
gain from it).

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
import threading

from . import jaxcompat

# Lets the kit's own tests pretend a TPU or GPU is present: "tpu", "gpu", "hopper", "cpu".
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

    devices = jax.devices()
    kinds = {"gpu" if d.platform in ("cuda", "rocm") else d.platform for d in devices}
    if any(_is_hopper(d) for d in devices):
        kinds.add("hopper")   # wgmma and TMA: what the hopper chapter compiles for
    return frozenset(kinds)


def _is_hopper(device) -> bool:
    """An NVIDIA GPU of compute capability 9.x (H100, H200, GH200)."""
    capability = str(getattr(device, "compute_capability", "") or "")
    return device.platform in ("cuda", "gpu") and capability.split(".")[0] == "9"


def gpu_names() -> str:
    """The GPUs JAX sees, in words (for a skip message)."""
    import jax

    try:
        return ", ".join(sorted({f"{d.device_kind} (compute capability "
                                 f"{getattr(d, 'compute_capability', '?')})"
                                 for d in jax.devices("gpu")})) or "none"
    except RuntimeError:
        return "none"


def use_interpret_mode(on: bool) -> None:
    """Sets (or clears) TPU interpret mode for the whole process, on the CPU.

    With it, XLA's optimisations are off: an interpret-mode program runs once,
    on small inputs, and compiling it is most of a test's time.
    """
    import jax

    jaxcompat.fix_kernel_trace_cache()
    jaxcompat.set_interpret_mode(on)
    jax.config.update("jax_disable_most_optimizations", on)
    if on:
        jax.config.update("jax_default_device", cpu_device())


def cpu_device():
    import jax

    return jax.devices("cpu")[0]


@contextlib.contextmanager
def on_gpu():
    """Inside: JAX's default device is the GPU again (for ``gpu``-marked tests)."""
    import jax

    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:  # pretended by the kit's own tests (PALLAS_HINTS_PLATFORMS)
        gpu = None
    with jax.default_device(gpu) if gpu is not None else contextlib.nullcontext():
        yield


GPU_HANG = ("KernelTimeout: no result after {seconds:g} s: a warpgroup waits on a barrier "
            "(plgpu.barrier_wait) that nothing completes")


@contextlib.contextmanager
def mosaic_gpu(compiled: bool, seconds: float = 0):
    """Inside: Mosaic GPU kernels (plgpu.kernel) run compiled on the GPU (``compiled``,
    for gpu-marked tests on a Hopper), else in GPU interpret mode with races raised and
    fresh buffers NaN; TPU interpret mode, set for the process, does not reach them.
    A kernel still running after ``seconds`` (a barrier wait nothing completes: the
    interpreter would wait forever, out of reach of SIGALRM) is failed, a little before
    ``watch``'s own time bound, so that the failure says it was a barrier."""
    timer = None
    if not compiled and seconds and seconds > 0:
        timer = threading.Timer(max(seconds - 1.0, seconds * 0.9), jaxcompat.abort_gpu_kernel,
                                args=(GPU_HANG.format(seconds=seconds),))
        timer.daemon = True
        timer.start()
    try:
        with jaxcompat.mosaic_gpu_kernels(interpret=not compiled):
            yield
    finally:
        if timer is not None:
            timer.cancel()


@contextlib.contextmanager
def compiled_for_tpu():
    """Inside: pallas_call lowers for a real TPU even on a CPU."""
    with jaxcompat.compiled_for_tpu():
        yield


@contextlib.contextmanager
def watch(seconds: float):
    """Runs one test: fails it on a race, or after ``seconds`` without a result."""
    __tracebackhide__ = True
    jaxcompat.reset_interpreter()
    with jaxcompat.recording_races([]) as races, _time_limit(seconds):
        try:
            yield
        except BaseException as error:
            if isinstance(error, KernelTimeout):   # its device threads still wait: end them
                if jaxcompat.abort_interpreter(str(error)):
                    _ABORTED.append(str(error))
            jaxcompat.reset_interpreter()  # a failed kernel leaves the simulated TPU dirty
            jaxcompat.drop_failed_tokens()
            raised = jaxcompat.race_in(error)
            if races or raised:
                raise RaceDetected(races + ([raised] if raised else [])) from None
            raise
    if not races and jaxcompat.interpreter_saw_race():
        races.append("a race (the interpreter did not say where)")
    if races:
        raise RaceDetected(races)


_ABORTED: list[str] = []   # kernels ended by the time bound in this process


def left_threads_behind() -> bool:
    """Whether a kernel was ended by the time bound in this process: the simulated
    chips' threads it leaves may keep the process from ending (see ``exit_now``)."""
    return bool(_ABORTED)


def exit_now(status: int) -> None:
    """Ends the process at once with ``status``, output flushed: after a kernel that was
    ended by the time bound, JAX would wait at exit for device threads that never end."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(int(status))


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
