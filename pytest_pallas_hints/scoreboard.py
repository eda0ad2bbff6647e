"""The scoreboard printed after every run, and the progress file behind it.

Per puzzle, this run's test results reduce to one status:

  solved       every test of the puzzle ran and passed (hardware-only tests
               that were skipped neither count nor block);
  failing      at least one test failed;
  not_started  every failure was the stub's NotImplementedError;
  partial      some tests passed and others did not run (-k, -x), or could not
               be verified on this JAX: the stored status stands;
  broken       its chapter file does not import: the stored status stands;
  kit_error    a test failed in the kit's own machinery, not in the learner's
               code: the stored status stands.

``.pallas_progress.json`` at the kit's root keeps statuses, the date each
chapter last ran and the hint level reached, so the scoreboard covers the
whole kit when only one file ran. Only the controller process writes it,
atomically; a file that cannot be read is set aside, never fatal.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import tempfile
from pathlib import Path

from . import jaxcompat
from .catalogue import Chapter

PROGRESS_FILE = ".pallas_progress.json"
# A folder for the progress file other than the kit's root (grading runs use a fresh one).
STATE_ENV = "PALLAS_HINTS_STATE"
VERSION = 1
BAR = 10


@dataclasses.dataclass
class PuzzleRun:
    """One puzzle's tests in this run."""
    total: int = 0                  # tests of the puzzle that can run here
    passed: int = 0
    failed: int = 0
    not_started: int = 0
    errored: int = 0                    # failures outside the test itself (setup, teardown)
    broken: int = 0                     # failures because the chapter does not import
    kit_errors: int = 0                 # failures of the kit itself, not counted as failed
    first_failure: object = None        # the PuzzleReport of its first failing test
    failures: list = dataclasses.field(default_factory=list)   # PuzzleReport each

    @property
    def status(self) -> str:
        if self.kit_errors and not self.failed:
            return "kit_error"
        if self.failed:
            if self.broken == self.failed and not self.passed:
                return "broken"
            return "not_started" if self.not_started == self.failed and not self.passed \
                else "failing"
        if self.passed and self.passed >= self.total:
            return "solved"
        return "partial" if self.passed else "not_run"


def tally(reports: list) -> tuple[dict[str, PuzzleRun], dict]:
    """Per puzzle results from report data, and what did not count, per reason:
    {"tpu": n, "gpu": n} hardware-only skips, {"unverifiable": {feature: n}} checks
    this JAX cannot support, {"kit_error": n} failures of the kit itself."""
    runs: dict[str, PuzzleRun] = {}
    outcome: dict[str, dict] = {}
    hardware_skips: dict[str, set] = {}
    for report in reports:
        run = runs.setdefault(report.puzzle, PuzzleRun())
        run.total = max(run.total, report.of)
        if report.needs:
            hardware_skips.setdefault(report.needs, set()).add(report.nodeid)
            continue
        previous = outcome.get(report.nodeid)
        if previous is None or report.outcome == "failed":
            outcome[report.nodeid] = report
    unverifiable: dict[str, int] = {}
    kit_errors = 0
    for report in outcome.values():
        run = runs[report.puzzle]
        if report.unverifiable:
            unverifiable[report.unverifiable] = unverifiable.get(report.unverifiable, 0) + 1
        if report.outcome == "failed" and report.kit_error:
            run.kit_errors += 1
            kit_errors += 1
            run.failures.append(report)
            run.first_failure = run.first_failure or report
        elif report.outcome == "failed":
            run.failed += 1
            run.failures.append(report)
            run.not_started += report.kind == "not_started"
            run.broken += report.kind == "broken_chapter"
            run.errored += report.when != "call"
            run.first_failure = run.first_failure or report
        elif report.outcome == "passed":
            run.passed += 1
    skipped: dict = {kind: len(ids) for kind, ids in sorted(hardware_skips.items())}
    if unverifiable:
        skipped["unverifiable"] = unverifiable
    if kit_errors:
        skipped["kit_error"] = kit_errors
    return runs, skipped


# ------------------------------------------------------------ progress ---

def folder(root: Path) -> Path:
    """Where the progress file lives: the kit's root, or $PALLAS_HINTS_STATE."""
    return Path(os.environ.get(STATE_ENV) or root)


def load(root: Path) -> tuple[dict, str | None]:
    """The stored progress, and a warning if the file had to be set aside."""
    path = folder(root) / PROGRESS_FILE
    if not path.exists():
        return _empty(), None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("version") != VERSION \
                or not isinstance(data.get("puzzles"), dict):
            raise ValueError("not a progress file of this kit's version")
    except (ValueError, OSError) as error:
        aside = path.with_name(f"{PROGRESS_FILE}.bad-{datetime.datetime.now():%Y%m%d-%H%M%S}")
        try:
            path.replace(aside)
        except OSError:
            pass
        return _empty(), (f"pallas: {PROGRESS_FILE} could not be read ({error}); "
                          f"moved aside to {aside.name}, starting a fresh one")
    data.setdefault("chapters", {})
    return data, None


def save(root: Path, data: dict) -> None:
    """Writes the progress file atomically: a temp file renamed over the old one."""
    fd, tmp = tempfile.mkstemp(prefix=PROGRESS_FILE + ".", suffix=".tmp", dir=folder(root))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, folder(root) / PROGRESS_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def record(progress: dict, runs: dict[str, PuzzleRun], chapter_of: dict[str, str],
           today: str) -> None:
    """Folds this run's statuses into the stored progress (in place)."""
    for puzzle_id, run in runs.items():
        if run.status in ("solved", "failing", "not_started"):
            entry = progress["puzzles"].setdefault(puzzle_id, {})
            entry["status"] = run.status
            entry["date"] = today
            if run.status == "solved":
                entry.pop("hint", None)  # hints start over if it breaks again
                entry["won"] = True      # its points were announced once: never again
        if run.status != "not_run" and puzzle_id in chapter_of:
            progress["chapters"][chapter_of[puzzle_id]] = today


@dataclasses.dataclass
class Outcome:
    """A run of the kit's tests, folded into the progress file: what the summary shows."""
    runs: dict
    skipped: dict
    progress: dict
    warning: str | None = None
    newly_solved: list = dataclasses.field(default_factory=list)
    solved_again: list = dataclasses.field(default_factory=list)   # solved, broken, solved
    hint_levels: dict = dataclasses.field(default_factory=dict)    # puzzle -> levels shown


def conclude(root: Path, chapters: dict[str, Chapter], reports: list, *, hint=None,
             levels: int = 3, record_it: bool = True) -> Outcome:
    """Tallies ``reports``, picks the hints to show (a bare --hint, ``"next"``, moves one
    level on for each failing puzzle) and, unless ``record_it`` is False (reference
    runs), records the run in the progress file. pytest's hooks and the watcher both
    end a run here, so progress moves the same way whichever ran."""
    progress, warning = load(root)
    runs, skipped = tally(reports)
    outcome = Outcome(runs, skipped, progress, warning)
    outcome.hint_levels = _hints_to_show(progress, runs, hint, levels)
    if not record_it:
        return outcome
    stored = progress["puzzles"]
    order = [p.id for c in chapters.values() for p in c.puzzles]
    outcome.newly_solved = [pid for pid in order if pid in runs and runs[pid].status == "solved"
                            and stored.get(pid, {}).get("status") != "solved"]
    outcome.solved_again = [pid for pid in outcome.newly_solved if stored.get(pid, {}).get("won")]
    chapter_of = {p.id: c.name for c in chapters.values() for p in c.puzzles}
    record(progress, runs, chapter_of, datetime.date.today().isoformat())
    try:
        save(root, progress)
    except OSError as error:
        outcome.warning = f"pallas: could not save progress ({error})"
    return outcome


def _hints_to_show(progress: dict, runs: dict[str, PuzzleRun], hint, levels: int) -> dict:
    """Which hint levels to show per failing puzzle; a bare --hint moves one on."""
    if hint is None:
        return {}
    shown = {}
    for puzzle_id, run in runs.items():
        if not run.failed:
            continue
        entry = progress["puzzles"].setdefault(puzzle_id, {})
        if hint == "next":
            level = min(entry.get("hint", 0) + 1, levels)
            shown[puzzle_id] = [level]
        else:
            level = hint
            shown[puzzle_id] = list(range(1, level + 1))
        entry["hint"] = max(entry.get("hint", 0), level)
    return shown


def _empty() -> dict:
    return {"version": VERSION, "puzzles": {}, "chapters": {}}


# ---------------------------------------------------------- scoreboard ---

def render(chapters: dict[str, Chapter], progress: dict, runs: dict[str, PuzzleRun],
           skipped: dict, command_for, title: str = "Pallas exercises",
           jax_version: str = "") -> list[str]:
    """The scoreboard lines. ``command_for(puzzle, hint)`` gives the command to run it."""
    stored = progress.get("puzzles", {})

    def status(puzzle) -> str:
        run = runs.get(puzzle.id)
        if run and run.status in ("solved", "failing", "not_started"):
            return run.status
        return stored.get(puzzle.id, {}).get("status", "not_started")

    all_puzzles = [p for c in chapters.values() for p in c.puzzles]
    solved = [p for p in all_puzzles if status(p) == "solved"]
    points = sum(p.points for p in solved)
    total_points = sum(p.points for p in all_puzzles)
    lines = [f"{title} · {len(solved)} of {len(all_puzzles)} puzzles · "
             f"{points} / {total_points} points"]
    width = max(len(name) for name in chapters) + 2
    ran_chapters = {p.chapter for p in all_puzzles if p.id in runs}
    for chapter in chapters.values():
        done = [p for p in chapter.puzzles if status(p) == "solved"]
        filled = BAR * len(done) // len(chapter.puzzles)
        bar = "█" * filled + "░" * (BAR - filled)
        count = f"{len(done)}/{len(chapter.puzzles)}"
        pts = f"{sum(p.points for p in done)}/{chapter.points} pts"
        line = f"  {chapter.name:<{width}}{bar}  {count:>5}  {pts:>11}"
        todo = next((p for p in chapter.puzzles if status(p) != "solved" and p.id in runs),
                    None) or next((p for p in chapter.puzzles if status(p) != "solved"), None)
        if any(runs.get(p.id) and runs[p.id].status == "broken" for p in chapter.puzzles):
            line += f"   does not run: fix exercises/{chapter.name}.py first"
        elif chapter.name not in ran_chapters:
            last = progress.get("chapters", {}).get(chapter.name)
            line += f"   last run {last}" if last else "   not run yet"
        elif todo is not None:
            line += f"   next: {todo.id}"
        lines.append(line.rstrip())
    for kind in ("tpu", "gpu"):
        if skipped.get(kind):
            count = skipped[kind]
            checks = "1 check needs" if count == 1 else f"{count} checks need"
            lines.append(f"  {kind:<{width}}{checks} a {kind.upper()} "
                         "(skipped here, never counted as passed)")
    unverifiable = skipped.get("unverifiable", {})
    missing = {f: n for f, n in unverifiable.items() if not jaxcompat.unfaithful(f)}
    if missing:
        count = sum(missing.values())
        checks = "1 check" if count == 1 else f"{count} checks"
        lines.append(f"  {'jax':<{width}}{checks} cannot be verified on JAX {jax_version} "
                     f"({', '.join(sorted(missing))}): never counted as passed")
    for feature, count in sorted(unverifiable.items()):
        if jaxcompat.unfaithful(feature):
            checks = "1 check" if count == 1 else f"{count} checks"
            lines.append(f"  {'here':<{width}}{checks} cannot be verified here: "
                         f"{feature[len(jaxcompat.UNFAITHFUL):]}: never counted as passed")
    if skipped.get("kit_error"):
        count = skipped["kit_error"]
        tests = "1 test" if count == 1 else f"{count} tests"
        lines.append(f"  {'kit':<{width}}{tests} hit a problem in the kit itself (above), "
                     "not in your code: not counted against you")
    unsolved = [p for p in all_puzzles if status(p) != "solved"]
    todo = next((p for p in unsolved if p.id in runs), None) \
        or next((p for p in unsolved if p.chapter in ran_chapters), None) \
        or next(iter(unsolved), None)
    broken = [c for c in chapters if any(
        runs.get(p.id) and runs[p.id].status == "broken" for p in chapters[c].puzzles)]
    if broken:
        lines.append(f"next: fix exercises/{broken[0]}.py so that it runs, then run "
                     f"pytest exercises/test_{broken[0]}.py")
    elif todo is not None:
        lines.append(f"next: {command_for(todo, status(todo) == 'failing')}")
    else:
        lines.append("every puzzle solved: well done!")
    return lines
