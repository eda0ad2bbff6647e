"""pytest-pallas-hints: the plugin behind the Pallas exercises.

Read top to bottom, this module is the table of contents:

  options        --hint[=N], --reference, --no-scoreboard, --pallas-timeout,
                 --classroom-result, --gradescope-results
  configure      resolve options once; register the run when the kit is here
  setup          skip tpu/gpu tests without the hardware; else TPU interpret mode,
                 with compiled programs kept between runs (compile_cache.py)
  call           fail on a race, or on a kernel that never finishes
  makereport     turn each failure into findings (diagnose.py)
  summary        failures grouped by puzzle, hints, the scoreboard
  sessionfinish  the progress file (controller only, never under --reference),
                 grading files (grading.py)

It stays inert outside a kit (no ``exercises/hints/`` under the rootdir) and
never imports JAX at import time.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import time
import traceback
from pathlib import Path

import pytest

from . import catalogue, chapters, compile_cache, grading, jaxcompat, scoreboard

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
    for line in ("puzzle(id): the puzzle this test checks, e.g. puzzle('basics.add_one')",
                 "tpu: runs only where a TPU is detected (kernels compiled, not interpreted)",
                 "gpu: runs only where an NVIDIA GPU is detected"):
        config.addinivalue_line("markers", line)
    hint = _hint_option(config.getoption("hint"))
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
        kit = catalogue.load(root)
    except catalogue.CatalogueError as error:
        raise pytest.UsageError(str(error)) from None
    chapters.configure("reference" if config.getoption("reference") else "exercises",
                       config.getoption("pallas_patch"))
    config.pluginmanager.register(PallasRun(config, root, kit, hint, seed), "pallas-run")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistSeed(seed), "pallas-xdist-seed")


def pytest_unconfigure(config):
    chapters.configure("exercises")
    compile_cache.uninstall()


@pytest.fixture
def rng(request):
    """Inputs for one test, from a seed derived from the session's seed and the test's
    id (fresh every run; `--seed N` replays one)."""
    from .checking import Rng

    return Rng.for_test(request.node.nodeid, request.config.stash.get(_SEED, 0))


class _XdistSeed:
    """Hands the controller's session seed to every xdist worker."""

    def __init__(self, seed: int):
        self.seed = seed

    def pytest_configure_node(self, node):
        node.workerinput["pallas_seed"] = self.seed


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


class PallasRun:
    """The hooks that act in a run of the kit's tests (registered by pytest_configure)."""

    def __init__(self, config, root: Path, kit: dict, hint, seed: int):
        self.config, self.root, self.kit, self.hint, self.seed = config, root, kit, hint, seed
        self.puzzles = catalogue.puzzles(kit)
        # a classroom copy ships no reference/, so no third hint (the solution)
        self.levels = catalogue.HINT_LEVELS - (not (root / "reference").is_dir())
        self.reference = config.getoption("reference")
        self.timeout = config.getoption("pallas_timeout")
        self.raw = config.getoption("verbose") > 0 or config.getoption("tbstyle") != "auto"
        self.platforms: frozenset[str] | None = None
        self.reports: list[dict] = []
        self.progress, self.warning = None, None
        self.runs: dict[str, scoreboard.PuzzleRun] = {}
        self.newly_solved: list[str] = []
        self.solved_again: list[str] = []        # solved before, broken since, solved now
        self.skipped: dict = {}                 # what did not count, per reason
        self.hint_levels: dict[str, list[int]] = {}
        self.broken_files: dict[str, str] = {}   # chapter -> why its tests did not collect
        self.started = time.monotonic()
        self._start_grades()

    # -- collection: how many tests each puzzle has, before -k deselects any
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items):
        counts: dict[str, int] = {}
        for item in items:
            puzzle_id = _puzzle_of(item)
            if puzzle_id and not _hardware_mark(item):
                counts[puzzle_id] = counts.get(puzzle_id, 0) + 1
        for item in items:
            puzzle_id = _puzzle_of(item)
            if puzzle_id and puzzle_id not in self.puzzles:
                raise pytest.UsageError(f"{item.nodeid}: puzzle {puzzle_id!r} is not in any "
                                        "exercises/hints/*.toml file")
            item.stash[_COUNT] = counts.get(puzzle_id, 0)

    # -- setup: hardware gating, and interpret mode where there is no TPU
    def pytest_runtest_setup(self, item):
        from . import runtime

        if self.platforms is None:  # detected once per session
            self.platforms = runtime.platforms()
            runtime.use_interpret_mode("tpu" not in self.platforms)
            if "tpu" not in self.platforms:
                cache = getattr(self.config, "cache", None)  # None under -p no:cacheprovider
                compile_cache.install(cache.mkdir("pallas-xla") if cache else None)
        kind = _hardware_mark(item)
        if kind and kind not in self.platforms:
            pytest.skip(f"needs a {kind.upper()}: none detected here "
                        f"(jax.devices() shows {', '.join(sorted(self.platforms))})")

    # -- call: races and hangs become failures; gpu tests run on the GPU
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        if not (_puzzle_of(item) or "exercises" in item.path.parts):
            return (yield)
        from . import runtime

        __tracebackhide__ = True
        on_gpu = runtime.on_gpu() if _hardware_mark(item) == "gpu" else contextlib.nullcontext()
        with runtime.watch(self.timeout), on_gpu:
            return (yield)

    # -- makereport: every failure of a puzzle test becomes findings
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        puzzle_id = _puzzle_of(item)
        if not puzzle_id or not (report.when == "call" or report.failed or report.skipped):
            return report
        uses_rng = "rng" in getattr(item, "fixturenames", ())
        data = {"puzzle": puzzle_id, "nodeid": report.nodeid, "of": item.stash.get(_COUNT, 0),
                "outcome": report.outcome, "when": report.when, "config": _config_label(item),
                "location": list(report.location[:2]), "duration": report.duration,
                "seed": self.seed if uses_rng else None, "test": item.originalname
                if hasattr(item, "originalname") else item.name,
                "needs": _hardware_mark(item) if report.skipped else None}
        if report.skipped and call.excinfo is not None \
                and isinstance(call.excinfo.value, jaxcompat.CannotVerify):
            data["unverifiable"] = call.excinfo.value.feature
        if report.failed and call.excinfo is not None:
            findings, dtype, output = _findings(call.excinfo, self.root)
            data.update(findings=[f.to_dict() for f in findings], dtype=dtype, output=output,
                        printed=_last_lines(report.capstdout))
            data["kit_error"] = findings[0].kind == "kit_error"
            if not self.raw:
                report.longrepr = "\n".join(self._failure_lines(data))
        report.pallas = data
        return report

    def pytest_report_teststatus(self, report, config):
        """A failure of the kit's own machinery is an error, not a wrong answer."""
        data = getattr(report, "pallas", None)
        if data and data.get("kit_error") and report.failed:
            return "error", "E", "KIT ERROR"
        return None

    def pytest_runtest_logreport(self, report):
        data = getattr(report, "pallas", None)
        if data:
            self.reports.append(data)

    def pytest_collectreport(self, report):
        name = Path(report.nodeid.split("::")[0]).stem
        if report.failed and name.startswith("test_") and name[5:] in self.kit:
            self.broken_files[name[5:]] = (f"{report.nodeid} could not be collected: "
                                           f"{str(report.longrepr).strip().splitlines()[-1]}")

    # -- sessionfinish: fold this run into the progress file; write grading files
    def pytest_sessionfinish(self, session, exitstatus):
        if self._is_worker():
            return
        self.progress, self.warning = scoreboard.load(self.root)
        self.runs, self.skipped = scoreboard.tally(self.reports)
        self._write_grades(exitstatus)
        if not (self.reports or self.broken_files):
            return
        self.hint_levels = self._hint_levels()
        if self.reference:
            return
        stored = self.progress["puzzles"]
        self.newly_solved = [pid for pid in self.puzzles if pid in self.runs
                             and self.runs[pid].status == "solved"
                             and stored.get(pid, {}).get("status") != "solved"]
        self.solved_again = [pid for pid in self.newly_solved if stored.get(pid, {}).get("won")]
        chapter_of = {pid: p.chapter for pid, p in self.puzzles.items()}
        scoreboard.record(self.progress, self.runs, chapter_of,
                          datetime.date.today().isoformat())
        try:
            scoreboard.save(self.root, self.progress)
        except OSError as error:
            self.warning = f"pallas: could not save progress ({error})"

    def _start_grades(self):
        """A result exists from the start: an error with 0 points, replaced at the end
        of the run; a run that dies on the way leaves it (never a stale file)."""
        for option, write in (("classroom_result", grading.nothing_ran_classroom),
                              ("gradescope_results", grading.nothing_ran_gradescope)):
            path = self.config.getoption(option)
            if path and not self._is_worker():
                Path(path).unlink(missing_ok=True)
                Path(path).write_text(write(self.kit) + "\n")

    def _write_grades(self, exitstatus):
        classroom = self.config.getoption("classroom_result")
        gradescope = self.config.getoption("gradescope_results")
        if not (classroom or gradescope):
            return
        graded = grading.grade(self.kit, self.runs, self.reports, self.broken_files,
                               lambda run: "\n".join(self._puzzle_lines(run)), self._command)
        completed = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) \
            and bool(self.reports or self.broken_files)
        if classroom:
            Path(classroom).write_text(grading.classroom_result(graded, completed) + "\n")
        if gradescope:
            board = scoreboard.render(self.kit, self.progress, self.runs, self.skipped,
                                      self._command, jax_version=_jax_version())
            results = grading.gradescope_results(graded, time.monotonic() - self.started,
                                                 "\n".join(board))
            Path(gradescope).write_text(json.dumps(results, indent=1) + "\n")

    # -- summary: pytest's own sections first, then ours
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter):
        if self.reports and self._every_failure_is_diagnosed(terminalreporter):
            self.config.option.tbstyle = "no"  # our diagnoses replace the tracebacks
            if self.config.option.reportchars == "fE":
                terminalreporter.reportchars = terminalreporter.reportchars.replace("f", "")
        result = yield
        if self.reports and self.progress is not None:
            self._write_summary(terminalreporter)
        return result

    def _write_summary(self, tr):
        failing = [p for p in self.puzzles.values()
                   if p.id in self.runs and (self.runs[p.id].failed or self.runs[p.id].kit_errors)]
        if self.warning:
            tr.write_line(self.warning, yellow=True)
        for puzzle_id in self.newly_solved:
            points = self.puzzles[puzzle_id].points
            tr.write_line(f"✓ {puzzle_id}  " + ("solved again" if puzzle_id in self.solved_again
                                                else f"solved · +{points} points"), green=True)
        if self.hint is not None and not failing:
            self._no_hint_needed(tr)
        if failing:
            id_width = max(len(p.id) for p in failing)
            tr.write_sep("=", "Pallas puzzles", red=True)
            broken_shown = set()
            for puzzle in failing:
                if self.runs[puzzle.id].status == "broken":  # one block for the chapter
                    if puzzle.chapter not in broken_shown:
                        broken_shown.add(puzzle.chapter)
                        for line in self._broken_lines(puzzle.chapter):
                            tr.write_line(line)
                        tr.write_line("")
                    continue
                lines = self._puzzle_lines(self.runs[puzzle.id], id_width)
                for level in self.hint_levels.get(puzzle.id, []):
                    lines += self._hint_lines(puzzle, level)
                for line in lines:
                    tr.write_line(line)
                if lines and not lines[0].startswith("·"):
                    tr.write_line("")
        if self.config.getoption("no_scoreboard"):
            return
        title = "Pallas exercises (reference solutions)" if self.reference else "Pallas exercises"
        tr.write_sep("-", "progress")
        for i, line in enumerate(scoreboard.render(self.kit, self.progress, self.runs,
                                                   self.skipped, self._command, title,
                                                   _jax_version())):
            tr.write_line(line, bold=i == 0)

    # -- the pieces
    def _no_hint_needed(self, tr) -> None:
        """--hint on puzzles that all pass: say so, and name the next puzzle."""
        solved = [pid for pid, run in self.runs.items() if run.status == "solved"]
        if not solved:
            return
        unsolved = [p for p in self.puzzles.values()
                    if self.progress["puzzles"].get(p.id, {}).get("status") != "solved"
                    and (p.id not in self.runs or self.runs[p.id].status != "solved")]
        following = next((p for p in unsolved if p.chapter == self.puzzles[solved[0]].chapter),
                         unsolved[0] if unsolved else None)
        tr.write_line(f"✓ {', '.join(solved)}: solved, so no hint needed."
                      + (f" Next: {self._command(following, hint=False)}" if following else
                         " Every puzzle is solved."), green=True)

    def _broken_lines(self, chapter: str) -> list[str]:
        """A chapter file that does not import: one block, not one per puzzle."""
        first = next(self.runs[p.id].first_failure for p in self.kit[chapter].puzzles
                     if p.id in self.runs and self.runs[p.id].status == "broken")
        finding = diagnose.Finding.from_dict(first["findings"][0])
        count = len(self.kit[chapter].puzzles)
        return [f"✗ {chapter}  (all {count} puzzles)"] + [
            "  " + line for line in diagnose.render([finding])]

    def _puzzle_lines(self, run, id_width: int = 0) -> list[str]:
        """A failing puzzle: its first failure in full, then the other failing configs."""
        lines = self._failure_lines(run.first_failure, id_width)
        if run.failed > 1 and run.status != "not_started":
            others = [f["config"] or f["nodeid"].split("::")[-1]
                      for f in run.failures if f is not run.first_failure]
            lines.append(f"  {'also':<{diagnose.LABEL_WIDTH}}fails on "
                         + ", ".join(f"[{c}]" for c in others))
        return lines

    def _failure_lines(self, data: dict, id_width: int = 0) -> list[str]:
        puzzle = self.puzzles[data["puzzle"]]
        findings = [diagnose.Finding.from_dict(f) for f in data.get("findings", [])]
        if findings and findings[0].kind == "not_started":
            return [f"· {puzzle.id:<{id_width}}  {self._how_far(puzzle, findings[0].where)}"
                    + self._stubs_to_edit(puzzle, findings[0].where)]
        label = ", ".join(str(x) for x in (data.get("config"), data.get("dtype"),
                                           data.get("seed") is not None and
                                           f"seed {data['seed']}") if x)
        kit_error = bool(data.get("kit_error"))
        head = (f"! {puzzle.id}  kit problem" if kit_error else f"✗ {puzzle.id}"
                + (f" · {data['output']}" if data.get("output") else ""))
        lines = [f"{head}  [{label}]" if label else head]
        lines += ["  " + line for line in diagnose.render(
            findings, None if kit_error else puzzle.say, data.get("output"))]
        if data.get("printed"):  # the learner's own print() debugging
            lines += [f"  {'printed' if n == 0 else '':<{diagnose.LABEL_WIDTH}}{text}"
                      for n, text in enumerate(data["printed"])]
        if data.get("seed") is not None:
            lines.append(f"  {'replay':<{diagnose.LABEL_WIDTH}}{self._replay(data)}")
        if self.hint is None and not kit_error:
            lines.append(f"  {'more':<{diagnose.LABEL_WIDTH}}{self._more(puzzle)}")
        return lines

    def _replay(self, data: dict) -> str:
        """The command that runs this test again on the same inputs."""
        test_file = self.root / data["nodeid"].split("::")[0]
        return (f"pytest {_relative(test_file, self.config)} --seed {data['seed']} "
                f"-k {data['test']}")

    def _more(self, puzzle) -> str:
        """The command for the next hint, or for all of them once each was seen."""
        stored = (self.progress or {}).get("puzzles", {}).get(puzzle.id, {}).get("hint", 0)
        if stored < self.levels:
            return f"{self._command(puzzle)}   (hint {stored + 1} of {self.levels})"
        return (f"{self._command(puzzle, hint=False)} --hint={self.levels}"
                f"   (all {self.levels} hints again)")

    def _how_far(self, puzzle, where: str) -> str:
        """"not started", or "unfinished" once one of the puzzle's functions is written."""
        path = where.rpartition(":")[0]
        stubs = chapters.stubs(self.root / path) if path else {}
        return "unfinished" if stubs and any(name not in stubs for name in puzzle.edit) \
            else "not started"

    def _stubs_to_edit(self, puzzle, where: str) -> str:
        """' — edit exercises/basics.py:60 add_one(), :44 add_one_kernel()': the stub
        that raised first, then the puzzle's other functions still to write."""
        if not where:
            return ""
        path, _, line = where.rpartition(":")
        stubs = chapters.stubs(self.root / path)
        by_line = {n: name for name, n in stubs.items()}
        raised = by_line.get(int(line))
        owner = next((p for p in self.puzzles.values()  # a puzzle of the same file
                      if p.chapter == puzzle.chapter and raised in p.edit), puzzle)
        todo = [(int(line), raised, owner)] + [
            (stubs[name], name, puzzle) for name in puzzle.edit
            if name in stubs and name != raised]
        shown = _relative(self.root / path, self.config)
        parts = [f"{shown}:{todo[0][0]}"] + [f":{n}" for n, _, _ in todo[1:]]
        for i, (_, name, owner) in enumerate(todo):
            if name:
                parts[i] += f" {name}()" + ("" if owner is puzzle else f" (from {owner.id})")
        return " — edit " + ", ".join(parts)

    def _hint_lines(self, puzzle, level: int) -> list[str]:
        title = {1: "the idea", 2: "a skeleton", 3: "the solution"}[level]
        text = catalogue.hint(self.root, puzzle, level)
        if level == 3 and catalogue.solution_source(self.root, puzzle) is not None:
            text = _highlight(self.config, text)
        of = f" of {self.levels}" if level <= self.levels else ""
        return [f"  hint {level}{of} · {title}"] + [
            "    " + line if line else "" for line in text.splitlines()]

    def _hint_levels(self) -> dict[str, list[int]]:
        """Which hint levels to show per failing puzzle; a bare --hint moves one on."""
        if self.hint is None:
            return {}
        levels = {}
        for puzzle_id, run in self.runs.items():
            if not run.failed:
                continue
            entry = self.progress["puzzles"].setdefault(puzzle_id, {})
            if self.hint == "next":
                level = min(entry.get("hint", 0) + 1, self.levels)
                levels[puzzle_id] = [level]
            else:
                level = self.hint
                levels[puzzle_id] = list(range(1, level + 1))
            entry["hint"] = max(entry.get("hint", 0), level)
        return levels

    def _command(self, puzzle, hint: bool = True) -> str:
        test_file = self.root / "exercises" / f"test_{puzzle.chapter}.py"
        return (f"pytest {_relative(test_file, self.config)} -k {puzzle.name}"
                + (" --hint" if hint else ""))

    def _every_failure_is_diagnosed(self, tr) -> bool:
        failed = tr.stats.get("failed", []) + tr.stats.get("error", [])
        return (not self.raw and bool(failed)
                and all(getattr(r, "pallas", None) for r in failed))

    def _is_worker(self) -> bool:
        return hasattr(self.config, "workerinput")


_COUNT = pytest.StashKey[int]()
_SEED = pytest.StashKey[int]()


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
    for filename, _, _ in reversed(frames):
        path = Path(filename)
        if path.parent.name == "pytest_pallas_hints" or (
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


def _relative(path: Path, config) -> str:
    try:
        return os.path.relpath(path, config.invocation_params.dir)
    except ValueError:
        return str(path)


def _highlight(config, source: str) -> str:
    tw = config.get_terminal_writer()
    if not tw.hasmarkup:
        return source
    try:
        return tw._highlight(source, lexer="python").rstrip("\n")
    except Exception:
        return source
