"""Quicker XLA compiles for interpret-mode programs, kept between runs.

Why: on a laptop most of a puzzle test's time goes to XLA compiling the
interpret-mode program (a loop over the grid that calls back into Python for
every load, store and DMA). Two things cut it:

* the older CPU code emitters (``xla_cpu_use_fusion_emitters=False``) compile
  these programs about 40% faster, and they run once, on small arrays;
* a compiled program that calls back into Python names each callback only by
  its index in a list handed over when the program is loaded. JAX's persistent
  cache refuses such programs, but one compiled in an earlier run works with
  this run's callbacks when they are handed over again. Learners re-run the
  tests after every edit, so every kernel they did not touch since loads in
  milliseconds instead of compiling.

The same folder remembers which programs passed ``lowers_for_tpu`` (the real
TPU lowering, another few hundred ms a test), keyed on a description of the
traced program that includes every parameter of every ``pallas_call``.

The cache is keyed on everything the compiled code depends on: the program text
(without source locations), the compile options, the XLA flags, and the
versions of JAX, jaxlib and the backend. It lives in pytest's cache folder
(``.pytest_cache/d/pallas-xla``): ``pytest --cache-clear`` empties it, and
``-p no:cacheprovider`` (as the grading workflow runs) turns it off.

``install`` routes JAX's one entry point for compiling a lowered program
through ``_compile`` (``jaxcompat.wrap_compiler``). That entry point is
private: where its signature is not the one expected, nothing is wrapped and
compiles are merely slower.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

FAST_CPU_OPTIONS = (("xla_cpu_use_fusion_emitters", False),)
PRUNE_ABOVE, PRUNE_TO = 256 << 20, 128 << 20   # bytes kept in the cache folder

_state = {"directory": None, "fast_options": True,
          "load_callbacks": True,  # False on a jaxlib that takes callbacks as capsules
          "compiled": 0, "loaded": 0}  # programs with host callbacks, since the start


def install(directory: Path | None) -> None:
    """From now on, compiles use the fast CPU options and the cache in
    ``directory`` (None: no cache). Safe to call again, e.g. by a second run in
    one process. Where JAX's compiler is not the one expected, nothing changes
    and compiles are merely slower."""
    global _state
    from . import jaxcompat

    shared = jaxcompat.wrap_compiler(_compile)
    if shared is None:
        return
    if shared:                 # wrapped already, maybe by an earlier import of this module
        _state = shared
    else:
        shared.update(_state)
        _state = shared
        _state["load_callbacks"] = jaxcompat.callbacks_load_as_objects()
    _state["directory"] = Path(directory) if directory else None
    if _state["directory"]:
        _prune(_state["directory"])


def uninstall() -> None:
    """Stops using the cache folder (the fast options stay: they change no result)."""
    _state["directory"] = None


def _compile(backend, computation, options, callbacks, executable_devices, compile):
    from . import jaxcompat

    if backend.platform != "cpu":
        return compile(options)
    if _state["fast_options"]:
        options.env_option_overrides = [*options.env_option_overrides, *FAST_CPU_OPTIONS]
    keep = _state["directory"] and (_state["load_callbacks"] or not callbacks)
    path = _entry(backend, computation, options) if keep else None
    if path is not None and path.exists():
        try:
            executable = jaxcompat.load_executable(backend, path.read_bytes(),
                                                   executable_devices, options, callbacks)
            os.utime(path)  # most recently used, for pruning
            _state["loaded"] += 1
            return executable
        except TypeError:  # JAX < 0.9 wants callbacks wrapped as capsules: keep none
            _state["load_callbacks"] = False
            path = None
        except Exception:
            path.unlink(missing_ok=True)  # torn or stale: compile afresh
    try:
        executable = compile(options)
    except Exception as error:
        if not (_state["fast_options"] and "No such compile option" in str(error)):
            raise
        _state["fast_options"] = False  # an XLA without the option: compile as JAX does
        options.env_option_overrides = [o for o in options.env_option_overrides
                                        if o not in FAST_CPU_OPTIONS]
        return _compile(backend, computation, options, callbacks, executable_devices, compile)
    _state["compiled"] += bool(callbacks)
    if path is not None:
        _store(path, backend, executable)
    return executable


def passed_before(check: str, description: str) -> Path | None:
    """The file that marks ``check`` as passed for the program described by
    ``description`` (``Program.describe()``; see ``record``), or None where nothing
    is kept."""
    if not _state["directory"]:
        return None
    return _state["directory"] / f"{_key(check, description)}.passed"


def record(mark: Path | None) -> None:
    """Marks a check as passed (``mark`` from ``passed_before``)."""
    if mark is not None:
        try:
            mark.parent.mkdir(parents=True, exist_ok=True)
            mark.touch()
        except OSError:
            pass


def _entry(backend, computation, options) -> Path | None:
    """The cache file for this program, or None where it cannot be keyed."""
    try:
        from .jaxcompat import program_text

        key = _key(backend.platform, backend.platform_version, os.environ.get("XLA_FLAGS", ""),
                   options.SerializeAsString(), program_text(computation))
        return _state["directory"] / f"{key}.xla"
    except Exception:
        return None


def _key(*parts: str | bytes) -> str:
    """A hash of the parts and of the JAX and jaxlib versions."""
    import jax
    import jaxlib

    key = hashlib.sha256()
    for part in (jax.__version__, jaxlib.__version__, *parts):
        key.update((part.encode() if isinstance(part, str) else part) + b"\0")
    return key.hexdigest()


def _store(path: Path, backend, executable) -> None:
    """Writes atomically (pytest -n 2 runs two writers); a failure only costs speed."""
    try:
        from .jaxcompat import serialize_executable

        data = serialize_executable(backend, executable)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
            f.write(data)
        os.replace(f.name, path)
    except Exception:
        pass


def _prune(directory: Path) -> None:
    """Keeps the folder under PRUNE_ABOVE bytes, dropping the least recently used."""
    try:
        entries = [(p.stat().st_mtime, p.stat().st_size, p) for p in directory.iterdir()
                   if p.suffix in (".xla", ".passed")]
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries) if total > PRUNE_ABOVE else ():
            if total <= PRUNE_TO:
                break
            path.unlink(missing_ok=True)
            total -= size
    except OSError:
        pass
