"""pytest-pallas-hints: the plugin behind the Pallas exercises.

Read top to bottom, this module is the table of contents:

  options        every one in the "pallas" group of pytest --help:
                   --hint[=N]             the next hint of each failing puzzle (N: levels 1..N)
                   --reference            run against reference/ (maintainers, CI)
                   --no-scoreboard        leave the scoreboard out
                   --pallas-timeout=S     fail a test that runs longer (a kernel that hangs;
                                          default 120 s; `pallas watch` has its own, 20 s,
                                          and stops a check at the first test past it)
                   --cost                 every kernel's cost on a TPU, as a table
                   --show[=html]          each puzzle's grid walk (and a page per puzzle)
                   --seed=N               the session's seed (replays a failure's inputs)
                   --classroom-result=P   GitHub Classroom's grading result
                   --gradescope-results=P Gradescope's results.json
                   --pallas-patch=FILE    load a known mistake over its chapter (maintainers)
  configure      resolve options once; register the run when the kit is here (and, under
                 xdist, what crosses between controller and workers: the seed, reports)
  setup          skip tpu/gpu tests without the hardware; else TPU interpret mode,
                 with compiled programs kept between runs (compile_cache.py)
  call           fail on a race, or on a kernel that never finishes
  makereport     turn each test into a PuzzleReport (reports.py): failures become
                 findings (diagnose.py), rendered as the learner reads them (terminal.py)
  sessionfinish  the run folded into the progress file (scoreboard.conclude;
                 controller only, never under --reference), grading files
                 (gradebook.py)
  summary        failures grouped by puzzle, hints, the scoreboard (terminal.py)

It stays inert outside a kit (no ``exercises/hints/`` under the rootdir) and
never imports JAX at import time.
"""
from __future__ import annotations

import contextlib
import sys
import time
import traceback
from pathlib import Path

import pytest

from . import catalogue, chapters, compile_cache, gradebook, jaxcompat, scoreboard, terminal
from .reports import PuzzleReport

try:
    from . import diagnose
except ImportError:  # no NumPy: nothing installed yet, and pytest_configure says so
    diagnose = None

HARDWARE_MARKS = ("tpu", "gpu")
DEFAULT_TIMEOUT = 120.0


def pytest_addoption(parser):
    group = parser.getgroup("pallas", "Pallas exercises")
    group.addoption(
        "--hint", action="store", nargs="?", const="next", default=None, metavar="N",
        help="for each failing puzzle, print its next hint. Bare --hint goes one "
             "level further each run on which the puzzle still fails; --hint=N "
             "prints levels 1..N (1: the idea, 2: a skeleton, 3: the solution).")
    group.addoption(
        "--reference", action="store_true", default=False,
        help="run the tests against the solutions in reference/ instead of "
             "exercises/ (for maintainers and CI; progress is not recorded).")
    group.addoption(
        "--no-scoreboard", action="store_true", default=False,
        help="do not print the progress scoreboard at the end of the run.")
    group.addoption(
        "--pallas-timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
        help="fail a puzzle test that runs longer than this, e.g. a kernel waiting "
             f"on a DMA nobody started (default {DEFAULT_TIMEOUT:g}; 0 turns it off).")
    group.addoption(
        "--cost", action="store_true", default=False,
        help="after the run, a table of what every kernel measured would cost on a TPU "
             "(v5e, v6e): MXU flops, HBM bytes, arithmetic intensity, VMEM, a roofline "
             "bound. Solved performance puzzles print their line anyway.")
    group.addoption(
        "--show", action="store", nargs="?", const="terminal", default=None,
        metavar="WHERE",
        help="draw each run puzzle's grid walk: which block every operand reads or writes "
             "at each step (a new copy or the block already there), which steps skip their "
             "work. --show: in the terminal; --show=html: also as an HTML page per puzzle "
             "in pallas-show/.")
    group.addoption(
        "--classroom-result", default=None, metavar="PATH",
        help="write the GitHub Classroom grading result (base64 JSON, one entry per "
             "puzzle) to PATH, for classroom-resources/autograding-grading-reporter.")
    group.addoption(
        "--gradescope-results", default=None, metavar="PATH",
        help="write Gradescope's results.json (one test per puzzle) to PATH.")
    group.addoption(
        "--seed", default=None, metavar="N",
        help="the session's seed: every test draws its inputs from a seed derived from "
             "it and the test's id. Default: a fresh seed each run (printed with every "
             "failure, so that `--seed N -k test` replays it).")
    group.addoption(
        "--pallas-patch", action="append", default=[], metavar="FILE",
        help="(kit maintainers) load FILE over its chapter module, e.g. a known "
             "mistake from tests/mistakes/<chapter>/, to check it is diagnosed.")


def pytest_load_initial_conftests(early_config, parser, args):
    """Keeps a bare ``--hint`` from swallowing the path after it (in place, before
    the main parse): ``--hint test_x.py`` -> ``--hint=next test_x.py``."""
    for i, arg in enumerate(args):
        if arg == "--hint" and not (i + 1 < len(args) and args[i + 1].isdigit()):
            args[i] = "--hint=next"


def pytest_configure(config):
    _SESSIONS.append(True)
    for line in ("puzzle(id): the puzzle this test checks, e.g. puzzle('basics.add_one')",
                 "tpu: runs only where a TPU is detected (kernels compiled, not interpreted)",
                 "gpu: runs only where an NVIDIA GPU is detected",
                 "mosaic_gpu(*features): a Mosaic GPU (Hopper) test: its kernels run in GPU "
                 "interpret mode on a CPU (\"cannot be verified\" where this JAX's interpreter "
                 "cannot run the features named, e.g. 'tma', 'wgmma'), and compiled where it "
                 "is also marked gpu and a Hopper GPU is present"):
        config.addinivalue_line("markers", line)
    hint = _hint_option(config.getoption("hint"))
    if config.getoption("show") not in (None, "terminal", "html"):
        raise pytest.UsageError(f"--show={config.getoption('show')}: give --show (the terminal) "
                                "or --show=html (the terminal and an HTML page per puzzle).")
    if config.getoption("pallas_timeout") < 0:
        raise pytest.UsageError("--pallas-timeout: give a number of seconds >= 0 "
                                "(0 turns the time bound off).")
    seed = _seed_option(config)
    root = Path(config.rootpath)
    if not catalogue.is_kit(root):
        return
    why = jaxcompat.unsupported(jaxcompat.installed("jax"))
    if why:
        raise pytest.UsageError(why)
    if config.getoption("reference") and not (root / "reference").is_dir():
        raise pytest.UsageError("--reference: this copy of the kit has no reference/ "
                                "folder (a classroom copy ships without solutions).")
    try:
        cache = getattr(config, "cache", None)   # None under -p no:cacheprovider
        kit = catalogue.load(root, cache.mkdir("pallas-catalogue") if cache else None)
    except catalogue.CatalogueError as error:
        raise pytest.UsageError(str(error)) from None
    chapters.configure("reference" if config.getoption("reference") else "exercises",
                       config.getoption("pallas_patch"))
    # Chips simulated on the CPU, for a chapter about several of them: asked for before
    # any test starts JAX, so that every chapter of a run sees the same devices.
    jaxcompat.simulate_cpu_devices(max((c.devices for c in kit.values()), default=1))
    screen = terminal.Screen(root, kit, hint, here=Path(config.invocation_params.dir),
                             highlight=lambda source: _highlight(config, source))
    config.pluginmanager.register(PallasRun(config, root, screen, seed), "pallas-run")
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(Controller(config, root, kit, hint, screen),
                                      "pallas-controller")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_Xdist(seed), "pallas-xdist")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    chapters.configure("exercises")
    compile_cache.uninstall()
    if _SESSIONS:
        _SESSIONS.pop()
    runtime = sys.modules.get("pytest_pallas_hints.runtime")
    if runtime is not None and runtime.left_threads_behind() and not _SESSIONS:
        # A kernel on several simulated chips ended by the time bound may leave a chip's
        # thread waiting, and JAX would wait for it at exit: the run is over (and it is
        # not a run nested in another, as the kit's own tests make), so end the process.
        runtime.exit_now(getattr(config, "_pallas_exitstatus", 1))


_SESSIONS: list[bool] = []   # pytest runs configured in this process and not yet over


@contextlib.contextmanager
def nested_run():
    """Around a pytest run in a process that goes on after it (the watcher's): a kernel
    ended by the time bound does not end the process when the run is over."""
    _SESSIONS.append(True)
    try:
        yield
    finally:
        _SESSIONS.pop()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    session.config._pallas_exitstatus = int(exitstatus)


@pytest.fixture
def rng(request):
    """Inputs for one test, from a seed derived from the session's seed and the test's
    id (fresh every run; `--seed N` replays one)."""
    from .checking import Rng

    return Rng.for_test(request.node.nodeid, request.config.stash.get(_SEED, 0))


class _Xdist:
    """Under xdist: hands the controller's session seed to every worker, and carries each
    test's PuzzleReport from the worker that made it to the controller."""

    def __init__(self, seed: int):
        self.seed = seed

    def pytest_configure_node(self, node):
        node.workerinput["pallas_seed"] = self.seed

    @pytest.hookimpl(wrapper=True)
    def pytest_report_to_serializable(self, config, report):
        data = yield
        if isinstance(data, dict) and isinstance(data.get("pallas"), PuzzleReport):
            data["pallas"] = data["pallas"].to_dict()
        return data

    @pytest.hookimpl(wrapper=True)
    def pytest_report_from_serializable(self, config, data):
        report = yield
        if isinstance(getattr(report, "pallas", None), dict):
            report.pallas = PuzzleReport.from_dict(report.pallas)
        return report


def _seed_option(config) -> int:
    """The session seed: --seed N, the controller's (under xdist), or a fresh one."""
    import random

    workerinput = getattr(config, "workerinput", None)
    value = config.getoption("seed")
    if workerinput is not None and "pallas_seed" in workerinput:
        seed = int(workerinput["pallas_seed"])
    elif value is None:
        seed = random.SystemRandom().randrange(100_000)
    elif value.isdigit():
        seed = int(value)
    else:
        raise pytest.UsageError(f"--seed={value}: give a whole number >= 0, e.g. --seed 1234.")
    config.stash[_SEED] = seed
    return seed


def _hint_option(value):
    """None (no hints), "next" (bare --hint) or a level 1..3; else a usage error."""
    if value in (None, "next"):
        return value
    if value.isdigit() and 1 <= int(value) <= catalogue.HINT_LEVELS:
        return int(value)
    raise pytest.UsageError(
        f"--hint={value}: give a level from 1 to {catalogue.HINT_LEVELS} "
        "(1: the idea, 2: a skeleton, 3: the solution), or bare --hint for the next one.")


def _start_jax(config) -> set:
    """The platforms JAX sees; without a TPU, Pallas runs interpreted, with the XLA
    compile cache under pytest's cache."""
    from . import runtime

    platforms = runtime.platforms()
    runtime.use_interpret_mode("tpu" not in platforms)
    if "tpu" not in platforms:
        cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
        compile_cache.install(cache.mkdir("pallas-xla") if cache else None)
    return platforms


class PallasRun:
    """The hooks that run the kit's tests, in every process that runs them (registered
    by pytest_configure)."""

    def __init__(self, config, root: Path, screen: terminal.Screen, seed: int):
        self.config, self.root, self.screen, self.seed = config, root, screen, seed
        self.puzzles = screen.puzzles
        self.timeout = config.getoption("pallas_timeout")
        self.raw = _raw(config)
        self.platforms: frozenset[str] | None = None

    # -- collection: how many tests each puzzle has, before -k deselects any
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items):
        counts = _tests_per_puzzle(items, self.puzzles)
        for item in items:
            item.stash[_COUNT] = counts.get(_puzzle_of(item), 0)

    # -- setup: hardware gating, and interpret mode where there is no TPU
    def pytest_runtest_setup(self, item):
        if self.platforms is None:  # detected once per session
            self.platforms = _start_jax(self.config)
        checking = sys.modules.get("pytest_pallas_hints.checking")
        if checking is not None:
            checking.measured_in_test(forget=True,
                                      tpu=item.get_closest_marker("tpu") is not None)
        kind = _hardware_mark(item)
        if kind == "tpu" and kind not in self.platforms and self.config.getoption("cost") \
                and _puzzle_of(item) and hasattr(item, "callspec"):
            item.stash[_PROJECTED] = _project(item, self.seed)
        if kind and kind not in self.platforms:
            pytest.skip(f"needs a {kind.upper()}: none detected here "
                        f"(jax.devices() shows {', '.join(sorted(self.platforms))})")
        if item.get_closest_marker("mosaic_gpu"):
            _mosaic_gpu_setup(item, compiled=kind == "gpu", platforms=self.platforms)

    # -- call: races and hangs become failures; gpu tests run on the GPU
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        if not (_puzzle_of(item) or "exercises" in item.path.parts):
            return (yield)
        __tracebackhide__ = True
        with _running(item, self.timeout):
            result = yield
            checking = sys.modules.get("pytest_pallas_hints.checking")
            if checking is not None:   # else the test measured nothing
                checking.check_after_test()
            return result

    # -- makereport: every failure of a puzzle test becomes findings
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        puzzle_id = _puzzle_of(item)
        if puzzle_id and not self.raw and call.when == "call" and call.excinfo is not None:
            # The failure's diagnosis replaces pytest's traceback (below): pytest need
            # not format one (it reads the source of every frame, JAX's too: a second
            # for a failure through a kernel).
            item.repr_failure = lambda excinfo, style=None: "(the kit's diagnosis follows)"
            try:
                report = yield
            finally:
                del item.repr_failure
        else:
            report = yield
        if not puzzle_id or not (report.when == "call" or report.failed or report.skipped):
            return report
        uses_rng = "rng" in getattr(item, "fixturenames", ())
        record = PuzzleReport(
            puzzle=puzzle_id, nodeid=report.nodeid, of=item.stash.get(_COUNT, 0),
            outcome=report.outcome, when=report.when, config=_config_label(item),
            location=tuple(report.location[:2]), duration=report.duration,
            seed=self.seed if uses_rng else None,
            test=item.originalname if hasattr(item, "originalname") else item.name,
            needs=_hardware_mark(item) if report.skipped else None)
        if report.skipped and call.excinfo is not None \
                and isinstance(call.excinfo.value, jaxcompat.CannotVerify):
            record.unverifiable = call.excinfo.value.feature
        if report.failed and call.excinfo is not None:
            record.findings, record.dtype, record.output = _findings(call.excinfo, self.root)
            record.printed = _last_lines(report.capstdout)
            record.kit_error = record.kind == "kit_error"
            if not self.raw:
                report.longrepr = "\n".join(self.screen.failure(record))
        if report.when == "call" and not report.skipped and (
                self.puzzles[puzzle_id].cost or self.config.getoption("cost")):
            whose = ("failed" if report.failed else
                     "reference" if self.config.getoption("reference") else "yours")
            record.cost = _costs(whose, record.config)
        if report.skipped and _PROJECTED in item.stash:
            record.cost, record.not_projected = item.stash[_PROJECTED]
        if self.config.getoption("show") and report.when == "call":
            record.show = _walks(record.config, call.excinfo if report.failed else None,
                                 record.kind or "")
        report.pallas = record
        return report

    def pytest_report_teststatus(self, report, config):
        """A failure of the kit's own machinery is an error, not a wrong answer."""
        record = getattr(report, "pallas", None)
        if record and record.kit_error and report.failed:
            return "error", "E", "KIT ERROR"
        return None


class Controller:
    """The work of the process that controls the run (the only one, without xdist): the
    reports of every test, folded into the progress file and the grading files at the
    end, and the summary (registered by pytest_configure, never on an xdist worker)."""

    def __init__(self, config, root: Path, kit: dict, hint, screen: terminal.Screen):
        self.config, self.root, self.kit, self.hint, self.screen = config, root, kit, hint, screen
        self.reference = config.getoption("reference")
        self.raw = _raw(config)
        self.reports: list[PuzzleReport] = []
        self.outcome: scoreboard.Outcome | None = None
        self.broken_files: dict[str, str] = {}   # chapter -> why its tests did not collect
        self.started = time.monotonic()
        self.grades = (config.getoption("classroom_result"),
                       config.getoption("gradescope_results"))
        gradebook.start_files(*self.grades, kit)

    def pytest_runtest_logreport(self, report):
        record = getattr(report, "pallas", None)
        if record:
            self.reports.append(record)

    def pytest_collectreport(self, report):
        name = Path(report.nodeid.split("::")[0]).stem
        if report.failed and name.startswith("test_") and name[5:] in self.kit:
            self.broken_files[name[5:]] = (f"{report.nodeid} could not be collected: "
                                           f"{str(report.longrepr).strip().splitlines()[-1]}")

    # -- sessionfinish: fold this run into the progress file; write grading files
    def pytest_sessionfinish(self, session, exitstatus):
        self.outcome = scoreboard.conclude(
            self.root, self.kit, self.reports, hint=self.hint, levels=self.screen.levels,
            record_it=not self.reference and bool(self.reports or self.broken_files))
        self.screen.progress = self.outcome.progress
        if any(self.grades):
            graded = gradebook.grade(self.kit, self.outcome.runs, self.reports, self.broken_files,
                                   lambda run: "\n".join(self.screen.puzzle(run)),
                                   self.screen.command)
            board = scoreboard.render(self.kit, self.outcome.progress, self.outcome.runs,
                                      self.outcome.skipped, self.screen.command,
                                      jax_version=_jax_version())
            gradebook.finish_files(
                *self.grades, graded, seconds=time.monotonic() - self.started,
                scoreboard_text="\n".join(board), completed=bool(self.reports or self.broken_files)
                and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED))

    # -- summary: pytest's own sections first, then ours
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter):
        if self.reports and not self.raw and _every_failure_is_diagnosed(terminalreporter):
            self.config.option.tbstyle = "no"  # our diagnoses replace the tracebacks
            if self.config.option.reportchars == "fE":
                terminalreporter.reportchars = terminalreporter.reportchars.replace("f", "")
        result = yield
        if self.reports and self.outcome is not None:
            self._write_summary(terminalreporter)
        return result

    def _write_summary(self, tr):
        title = "Pallas exercises (reference solutions)" if self.reference else "Pallas exercises"
        for text, style in terminal.summary(
                self.screen, self.outcome, reports=self.reports,
                cost_table=self.config.getoption("cost"), show=self.config.getoption("show"), title=title, jax_version=_jax_version(),
                scoreboard_shown=not self.config.getoption("no_scoreboard")):
            if style.startswith("sep"):
                tr.write_sep(style[3:], text, red=text == "Pallas puzzles")
            else:
                tr.write_line(text, **({style: True} if style else {}))


def _raw(config) -> bool:
    """Whether the learner asked for pytest's own tracebacks (-v, --tb=...)."""
    return config.getoption("verbose") > 0 or config.getoption("tbstyle") != "auto"


_COUNT = pytest.StashKey[int]()
_SEED = pytest.StashKey[int]()


_PROJECTED = pytest.StashKey[tuple]()


def _costs(whose: str = "", config: str = "") -> list:
    """The cost of every kernel the test measured (cost.py); nothing when the kit cannot
    count them here."""
    from . import checking, cost

    try:
        return [c for measured in checking.measured_in_test()
                for c in cost.of(measured, whose, config)]
    except Exception:   # uncountable, or unverifiable on this JAX: no line, no failure
        return []


def _project(item, seed: int) -> tuple[list, str]:
    """--cost for a tpu configuration without a TPU: its kernels counted at that size
    (projection.py), or why not."""
    from . import projection

    try:
        return projection.run(item.obj, dict(item.callspec.params), _config_label(item),
                              seed, item.nodeid)
    except Exception as error:   # the kit's own: no projection, no failure
        return [], f"the kit could not project it ({type(error).__name__})"


def _walks(config: str = "", excinfo=None, kind: str = "") -> list:
    """The grid walk of every kernel the test measured (show.py); for a failing test, the
    walk of the program it traced, run or not, with the wrong output blocks marked."""
    from . import checking, show

    failed = kind if excinfo is not None else ""
    try:
        walks = [w for measured in checking.measured_in_test()
                 for w in show.of(measured, config, failed)]
        if not walks and excinfo is not None:
            walks = [w for traced, args in checking.traced_in_test()
                     for w in show.planned(traced, args, config, failed)]
    except Exception:
        return []
    error = excinfo.value if excinfo is not None else None
    if isinstance(error, checking.Mismatch):
        walks = [w.with_wrong(*_wrong_boxes(error)) for w in walks]
    return walks


def _wrong_boxes(error) -> tuple[tuple, list]:
    """(the output's shape, the element boxes of its wrong blocks) from a Mismatch."""
    from . import diagnose
    from .frozen import np

    try:
        yours, expected = np.asarray(error.yours), np.asarray(error.expected)
        if yours.shape != expected.shape or error.blocks is None:
            return expected.shape, []
        bad = ~diagnose.close(yours, expected, error.tolerance)
        sizes = [s if b is None else b for s, b in zip(expected.shape, error.blocks)]
        boxes = set()
        for ix in np.argwhere(bad):
            boxes.add(tuple((int(i) // z * z, min(int(i) // z * z + z, s))
                            for i, z, s in zip(ix, sizes, expected.shape)))
        return expected.shape, sorted(boxes)
    except Exception:
        return (), []


@contextlib.contextmanager
def _running(item, timeout):
    """Around a puzzle test's call: the hang bound, the GPU for gpu tests, Mosaic GPU's
    interpret mode; a chapter file that failed to load fails, even where this JAX could
    not verify the puzzle."""
    from . import runtime

    __tracebackhide__ = True
    on_gpu = runtime.on_gpu() if _hardware_mark(item) == "gpu" else contextlib.nullcontext()
    mosaic_gpu = (runtime.mosaic_gpu(compiled=_hardware_mark(item) == "gpu", seconds=timeout)
                  if item.get_closest_marker("mosaic_gpu") else contextlib.nullcontext())
    with runtime.watch(timeout), on_gpu, mosaic_gpu:
        try:
            yield
        except jaxcompat.CannotVerify:
            raise (_broken_chapter(item) or sys.exc_info()[1]) from None


def _broken_chapter(item) -> BaseException | None:
    """Why a chapter file the test's module uses failed to load (its rule broken, or
    its import raised), if one did."""
    for value in vars(getattr(item, "module", None) or object()).values():
        if isinstance(value, chapters.BrokenChapter):
            return value.import_error
    return None


def _mosaic_gpu_setup(item, compiled: bool, platforms) -> None:
    """A Mosaic GPU test runs compiled only on a Hopper; in GPU interpret mode only where
    this JAX's interpreter runs the features it names (else "cannot be verified")."""
    from . import runtime

    if compiled:
        if "hopper" not in platforms:
            pytest.skip(f"needs a Hopper GPU (compute capability 9.0: wgmma, TMA): found "
                        f"{runtime.gpu_names()}")
        return
    if _broken_chapter(item):
        return   # the chapter file itself is what fails, with its line, on any JAX
    features = [f for mark in item.iter_markers("mosaic_gpu") for f in mark.args] or ["kernels"]
    for feature in dict.fromkeys(features):
        why = jaxcompat.gpu_interpret_missing(feature)
        if why:
            raise jaxcompat.CannotVerify(jaxcompat.GPU_INTERPRET, why)


def _tests_per_puzzle(items, puzzles) -> dict[str, int]:
    """How many tests each puzzle has that can run here, before -k deselects any."""
    counts: dict[str, int] = {}
    for item in items:
        puzzle_id = _puzzle_of(item)
        if puzzle_id and puzzle_id not in puzzles:
            raise pytest.UsageError(f"{item.nodeid}: puzzle {puzzle_id!r} is not in any "
                                    "exercises/hints/*.toml file")
        if puzzle_id and not _hardware_mark(item):
            counts[puzzle_id] = counts.get(puzzle_id, 0) + 1
    return counts


def _every_failure_is_diagnosed(tr) -> bool:
    failed = tr.stats.get("failed", []) + tr.stats.get("error", [])
    return bool(failed) and all(getattr(r, "pallas", None) for r in failed)


def _puzzle_of(item) -> str | None:
    mark = item.get_closest_marker("puzzle")
    return mark.args[0] if mark and mark.args else None


def _hardware_mark(item) -> str | None:
    return next((k for k in HARDWARE_MARKS if item.get_closest_marker(k)), None)


def _config_label(item) -> str:
    callspec = getattr(item, "callspec", None)
    return callspec.id if callspec else ""


def _findings(excinfo, root: Path):
    """Findings for a failed test's exception, the expected dtype and the name of
    the output compared ("dx"), where known. A failure of the kit itself is one
    finding, kind "kit_error", never a diagnosis of the learner's code."""
    error = excinfo.value
    frames = [(f.filename, f.lineno, f.line or "") for f in traceback.extract_tb(excinfo.tb)]
    try:
        if _kit_fault(error, frames):
            return [diagnose.kit_error(error, frames)], None, None
        if isinstance(error, chapters.MissingFunction):   # renamed or deleted: no output
            return error.findings(), None, None
        if callable(getattr(error, "findings", None)):  # Mismatch, TooMuchTraffic
            expected = getattr(error, "expected", None)
            name = getattr(error, "name", "output")
            return (error.findings(), str(expected.dtype) if expected is not None else None,
                    None if name == "output" else name)
        return [diagnose.explain(error, frames, root)], None, None
    except Exception as broken:  # the diagnosis itself failed: the kit's fault too
        return [diagnose.kit_error(broken, frames)], None, None


def _kit_fault(error: BaseException, frames) -> bool:
    """Whether a failure is the kit's, not the learner's: a KitError, or an
    exception (not a verdict) whose innermost frame in kit or chapter code is the
    kit's (its plugin, or a test file)."""
    from . import checking, runtime

    if isinstance(error, checking.KitError):
        return True
    if isinstance(error, (AssertionError, NotImplementedError, chapters.ChapterImportError,
                          runtime.KernelTimeout)) or getattr(error, "pallas_learner", False):
        return False
    package = Path(__file__).resolve().parent
    for filename, _, _ in reversed(frames):
        path = Path(filename)
        if package in path.resolve().parents or (
                path.parent.name in ("exercises", "tests") and path.name.startswith("test_")):
            return True
        if path.parent.name in ("exercises", "reference") or path.parent.parent.name == "mistakes":
            return False
    return False


def _jax_version() -> str:
    return jaxcompat.installed("jax") or "?"


def _last_lines(text: str, count: int = 8) -> list[str]:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return (["..."] if len(lines) > count else []) + lines[-count:]


def _highlight(config, source: str) -> str:
    tw = config.get_terminal_writer()
    if not tw.hasmarkup:
        return source
    try:
        return tw._highlight(source, lexer="python").rstrip("\n")
    except Exception:
        return source
