"""Every line a learner reads, rendered from plain data: a failure's diagnosis, a
puzzle's block, a hint, the summary after a run.

pytest's hooks (plugin.py) and the watcher (watch.py) both render through a
``Screen``; neither formats text of its own. A line comes as ``(text, style)``:
style is "" or "green", "red", "yellow", "bold", or "sep=" / "sep-" for a
separator line whose text is its title.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable

from . import catalogue, chapters, cost, scoreboard
from .reports import PuzzleReport

try:
    from . import diagnose
except ImportError:  # no NumPy yet: the plugin says so at configure time
    diagnose = None

Line = tuple[str, str]
WATCH_KEYS = "save to check · h hint · n next · p previous · a chapter · r replay · q quit"
TITLES = {1: "the idea", 2: "a skeleton", 3: "the solution"}


@dataclasses.dataclass
class Screen:
    """What rendering needs to know of the kit and of this learner."""
    root: Path
    kit: dict                          # chapter name -> catalogue.Chapter
    hint: object = None                # None, "next" (bare --hint) or a level 1..3
    progress: dict | None = None       # the progress file's content, once loaded
    here: Path | None = None           # where the learner runs commands from
    highlight: Callable[[str], str] = lambda source: source
    keys: bool = False                 # the watcher's screen: keys to press, not commands

    @property
    def puzzles(self) -> dict:
        return catalogue.puzzles(self.kit)

    @property
    def levels(self) -> int:
        """Hint levels there are: a classroom copy ships no reference/, so no solution."""
        return catalogue.HINT_LEVELS - (not (self.root / "reference").is_dir())

    # -- one failure, one puzzle, one chapter
    def failure(self, report: PuzzleReport, id_width: int = 0) -> list[str]:
        """One failing test: its header, the diagnosis, what the code printed, the
        replay command and the next hint's command."""
        puzzle = self.puzzles[report.puzzle]
        findings = report.findings
        if report.kind == "not_started":
            return [f"· {puzzle.id:<{id_width}}  {self._how_far(puzzle, findings[0].where)}"
                    + self._stubs_to_edit(puzzle, findings[0].where)]
        label = ", ".join(str(x) for x in (report.config, report.dtype,
                                           report.seed is not None and
                                           f"seed {report.seed}") if x)
        kit_error = report.kit_error
        head = (f"! {puzzle.id}  kit problem" if kit_error else f"✗ {puzzle.id}"
                + (f" · {report.output}" if report.output else ""))
        lines = [f"{head}  [{label}]" if label else head]
        lines += ["  " + line for line in diagnose.render(
            findings, None if kit_error else puzzle.say, report.output)]
        if report.printed:  # the learner's own print() debugging
            lines += [f"  {'printed' if n == 0 else '':<{diagnose.LABEL_WIDTH}}{text}"
                      for n, text in enumerate(report.printed)]
        if report.seed is not None:
            lines.append(f"  {'replay':<{diagnose.LABEL_WIDTH}}{self._replay(report)}")
        if self.hint is None and not kit_error:
            lines.append(f"  {'more':<{diagnose.LABEL_WIDTH}}{self._more(puzzle)}")
        return lines

    def puzzle(self, run, id_width: int = 0) -> list[str]:
        """A failing puzzle: its first failure in full, then the other failing configs."""
        lines = self.failure(run.first_failure, id_width)
        if run.failed > 1 and run.status != "not_started":
            others = [f.config or f.nodeid.split("::")[-1]
                      for f in run.failures if f is not run.first_failure]
            lines.append(f"  {'also':<{diagnose.LABEL_WIDTH}}fails on "
                         + ", ".join(f"[{c}]" for c in others))
        return lines

    def broken(self, chapter: str, runs: dict) -> list[str]:
        """A chapter file that does not import: one block, not one per puzzle."""
        first = next(runs[p.id].first_failure for p in self.kit[chapter].puzzles
                     if p.id in runs and runs[p.id].status == "broken")
        finding = first.findings[0]
        count = len(self.kit[chapter].puzzles)
        return [f"✗ {chapter}  (all {count} puzzles)"] + [
            "  " + line for line in diagnose.render([finding])]

    def hint_lines(self, puzzle, level: int) -> list[str]:
        text = catalogue.hint(self.root, puzzle, level)
        if level == 3 and catalogue.solution_source(self.root, puzzle) is not None:
            text = self.highlight(text)
        of = f" of {self.levels}" if level <= self.levels else ""
        return [f"  hint {level}{of} · {TITLES[level]}"] + [
            "    " + line if line else "" for line in text.splitlines()]

    def command(self, puzzle, hint: bool = True) -> str:
        test_file = self.root / "exercises" / f"test_{puzzle.chapter}.py"
        return f"pytest {self._relative(test_file)} -k {puzzle.name}" + (" --hint" if hint else "")

    # -- the watcher (pallas watch): a screen per check, redrawn
    def checking(self, puzzles: list, changed=(), bound: float = 0) -> list[str]:
        """While a check runs: which puzzles, why (the functions the save changed), and
        what a key pressed now does."""
        names = ", ".join(p.id for p in puzzles) if len(puzzles) <= 3 else \
            f"the {len(puzzles)} puzzles of {puzzles[0].chapter}"
        why = f"   (you changed {', '.join(f'{name}()' for name in changed)})" if changed else ""
        stop = f" · a kernel is stopped after {bound:g} s" if bound else ""
        return [f"… checking {names}{why}",
                f"  a key acts when the check ends (one key; q quits){stop}"]

    def verdict(self, outcome, puzzles: list, current, *, hint: bool = False, reports=(),
                following=None) -> list[str]:
        """After a check: each puzzle's line or block (a solved performance puzzle with
        its cost, as pytest's summary), the hints asked for, one progress line, what to
        press next."""
        runs, lines, broken_shown = outcome.runs, [], set()
        stopped = any(run.first_failure is not None and run.first_failure.kind == "hang"
                      for run in runs.values())
        for puzzle in puzzles:
            run = runs.get(puzzle.id)
            if run is None:
                lines.append(f"· {puzzle.id}  " + ("not checked: the check stopped at the "
                                                   "kernel that ran out of time" if stopped
                                                   else "did not run (no test selected)"))
            elif run.status == "solved":
                lines += self.solved(puzzle.id, outcome, reports)
            elif run.status == "broken":
                if puzzle.chapter not in broken_shown:
                    broken_shown.add(puzzle.chapter)
                    lines += self.broken(puzzle.chapter, runs)
            elif run.failed or run.kit_errors:
                lines += self.puzzle(run)
                if run.first_failure.kind == "hang" and run.passed + run.failed < run.total:
                    lines += ["  " + line for line in diagnose.row(
                        "stopped", "a check stops at the first configuration that runs out "
                                   "of time: the others did not run")]
            else:
                lines.append(f"· {puzzle.id}  {run.status.replace('_', ' ')}")
        run = runs.get(current.id)
        solved = run is not None and run.status == "solved"
        if hint and solved:
            lines.append(f"  no hint needed: {current.id} is solved"
                         + (f" (n: the next puzzle, {following.id})" if following else ""))
        for level in outcome.hint_levels.get(current.id, []) if hint else ():
            lines += self.hint_lines(current, level)
        lines += ["", self.progress_line(outcome, current.chapter)]
        if solved and following is not None:
            lines.append(f"next: {following.id} (press n)")
        lines.append(WATCH_KEYS)
        return lines

    def solved(self, puzzle_id: str, outcome, reports=()) -> list[str]:
        """A solved puzzle's line ("+10 points" the first time, "solved again" after it
        failed in between) and, for a performance puzzle, its cost on a TPU."""
        if puzzle_id in outcome.solved_again:
            said = "solved again"
        elif puzzle_id in outcome.newly_solved:
            said = f"solved · +{self.puzzles[puzzle_id].points} points"
        else:
            said = "solved"
        return [f"✓ {puzzle_id}  {said}"] + [f"  {line}" for line in cost_lines(puzzle_id,
                                                                             reports)]

    def progress_line(self, outcome, chapter: str) -> str:
        """'Pallas exercises · 3 of 44 puzzles · 30 / 720 points   basics ███░░░░░░░ 3/9'."""
        board = scoreboard.render(self.kit, outcome.progress, outcome.runs, outcome.skipped,
                                  self.command)
        mine = next((line.strip() for line in board[1:]
                     if line.strip().startswith(chapter + " ")), "")
        return board[0] + (f"   {' '.join(mine.split()[:3])}" if mine else "")

    def moved(self, puzzle, key: str) -> str:
        """Where n or p went."""
        chapter = self.kit[puzzle.chapter].puzzles
        where = f"puzzle {chapter.index(puzzle) + 1} of {len(chapter)} in {puzzle.chapter}"
        return f"{key}: {'next' if key == 'n' else 'previous'} puzzle, {puzzle.id} ({where})"

    def no_further(self, current, key: str) -> str:
        """n on a chapter's last puzzle, p on its first."""
        if key == "p":
            return f"p: {current.id} is the first puzzle of {current.chapter}"
        chapters = list(self.kit)
        place = chapters.index(current.chapter) + 1
        after = (f" (the next chapter, {chapters[place]}, is checked when you save "
                 f"exercises/{chapters[place]}.py)") if place < len(chapters) else ""
        return f"n: {current.id} is the last puzzle of {current.chapter}{after}"

    def dropped(self, acted: str, keys: str) -> str:
        """Keys pressed during a check beyond the one acted on."""
        return (f"dropped {' '.join(keys)}: one key acts after a check ({acted} did); "
                "press again what you meant")

    def also_changed(self, others: list) -> str:
        """A save that changed the code of more puzzles than the one checked."""
        names = ", ".join(p.id for p in others[:2]) + (f" and {len(others) - 2} more"
                                                        if len(others) > 2 else "")
        return f"also changed: {names} (a: check the chapter)"

    def unknown_key(self, key: str) -> str:
        return f"{key!r} does nothing here: {WATCH_KEYS}"

    def nothing_to_replay(self) -> str:
        return "r replays a failure's inputs: nothing has failed with drawn inputs yet"

    def could_not_run(self, why: str, tail=()) -> list[str]:
        """pytest itself could not run the check (said, and the watcher goes on)."""
        return [f"! the check could not run: {why}", *tail,
                "  save the file to try again, or press q to quit"]

    # -- the pieces
    def _replay(self, report: PuzzleReport) -> str:
        """The command (or, watching, the key) that runs this test again on the same
        inputs."""
        if self.keys:
            return f"press r   (the same inputs again, seed {report.seed})"
        test_file = self.root / report.nodeid.split("::")[0]
        return f"pytest {self._relative(test_file)} --seed {report.seed} -k {report.test}"

    def _more(self, puzzle) -> str:
        """The command for the next hint, or for all of them once each was seen."""
        stored = (self.progress or {}).get("puzzles", {}).get(puzzle.id, {}).get("hint", 0)
        if self.keys:
            return (f"press h   (hint {stored + 1} of {self.levels})" if stored < self.levels
                    else f"press h   (hint {self.levels} of {self.levels} again)")
        if stored < self.levels:
            return f"{self.command(puzzle)}   (hint {stored + 1} of {self.levels})"
        return (f"{self.command(puzzle, hint=False)} --hint={self.levels}"
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
        shown = self._relative(self.root / path)
        parts = [f"{shown}:{todo[0][0]}"] + [f":{n}" for n, _, _ in todo[1:]]
        for i, (_, name, owner) in enumerate(todo):
            if name:
                parts[i] += f" {name}()" + ("" if owner is puzzle else f" (from {owner.id})")
        return " — edit " + ", ".join(parts)

    def _relative(self, path: Path) -> str:
        try:
            return os.path.relpath(path, self.here or Path.cwd())
        except ValueError:
            return str(path)


# ------------------------------------------------------------- the whole run ---

def summary(screen: Screen, outcome, *, reports=(), cost_table: bool = False,
            show: str | None = None, title: str = "Pallas exercises",
            scoreboard_shown: bool = True, jax_version: str = "?") -> list[Line]:
    """What follows pytest's own summary for a ``scoreboard.Outcome``: puzzles
    solved (a performance puzzle with its cost on a TPU), failing puzzles (with their
    hints), the table of every kernel's cost (``--cost``), then the scoreboard."""
    runs, lines = outcome.runs, []
    warning, hint_levels = outcome.warning, outcome.hint_levels
    failing = [p for p in screen.puzzles.values()
               if p.id in runs and (runs[p.id].failed or runs[p.id].kit_errors)]
    if warning:
        lines.append((warning, "yellow"))
    for puzzle_id in outcome.newly_solved:
        said = screen.solved(puzzle_id, outcome, reports)
        lines += [(said[0], "green")] + [(line, "") for line in said[1:]]
    if screen.hint is not None and not failing:
        lines += _no_hint_needed(screen, runs)
    if failing:
        lines.append(("Pallas puzzles", "sep="))
        id_width = max(len(p.id) for p in failing)
        broken_shown = set()
        for puzzle in failing:
            if runs[puzzle.id].status == "broken":  # one block for the chapter
                if puzzle.chapter not in broken_shown:
                    broken_shown.add(puzzle.chapter)
                    lines += [(line, "") for line in screen.broken(puzzle.chapter, runs)]
                    lines.append(("", ""))
                continue
            block = screen.puzzle(runs[puzzle.id], id_width)
            for level in (hint_levels or {}).get(puzzle.id, []):
                block += screen.hint_lines(puzzle, level)
            lines += [(line, "") for line in block]
            if block and not block[0].startswith("·"):
                lines.append(("", ""))
    if show:
        lines.append(("the grid's walk", "sep-"))
        lines += [(line, "") for line in walk_lines(screen, reports, html=show == "html")]
    if cost_table:
        lines.append((f"cost on {cost.priced_on(c for r in reports for c in r.cost)}",
                      "sep-"))
        lines += [(line, "") for line in cost_table_lines(reports)]
    if scoreboard_shown:
        lines.append(("progress", "sep-"))
        board = scoreboard.render(screen.kit, screen.progress, runs, outcome.skipped,
                                  screen.command, title, jax_version)
        lines += [(line, "bold" if i == 0 else "") for i, line in enumerate(board)]
    return lines


def walk_lines(screen: Screen, reports, html: bool = False) -> list[str]:
    """--show: per puzzle run, its first test's walk in the terminal; with ``html``, a
    page per puzzle (every test) in pallas-show/, named."""
    from . import show

    lines, by_puzzle = [], {}
    for report in reports:
        if report.show:
            by_puzzle.setdefault(report.puzzle, []).append(report)
    for puzzle_id, runs in by_puzzle.items():
        first = runs[0]
        lines.append(f"{puzzle_id} [{first.config or first.test}]")
        for walk in first.show:
            lines += ["  " + line for line in show.terminal(walk)]
        if html:
            folder = (screen.here or Path.cwd()) / "pallas-show"
            folder.mkdir(exist_ok=True)
            page = folder / f"{puzzle_id}.html"
            walks = [w for report in runs for w in report.show]
            failed = next((report for report in runs if report.findings), None)
            verdict = "\n".join(screen.failure(failed)) if failed else ""
            page.write_text(show.html(puzzle_id, walks, verdict=verdict), encoding="utf-8")
            lines.append(f"  drawn: {screen._relative(page)}")
        lines.append("")
    return lines or ["no kernel ran with a grid to draw"]


def cost_table_lines(reports) -> list[str]:
    """--cost: per puzzle, every kernel of its tests (a failing test's too), then its
    tpu configuration projected (the learner's kernels beside the reference's), or why
    that configuration could not be projected."""
    by_puzzle: dict[str, list] = {}
    for report in reports:
        by_puzzle.setdefault(report.puzzle, []).append(report)
    lines = []
    for puzzle_id, runs in by_puzzle.items():
        rows = []
        for report in sorted(runs, key=lambda r: any(c.projected for c in r.cost)):
            for c in report.cost:
                where = c.config or report.config or report.test
                tag = {"failed": "your run (its test failed)", "yours": "your run",
                       "reference": "reference run"}.get(c.whose, "run")
                if c.projected:
                    tag = (f"{'yours' if c.whose == 'yours' else 'the reference'}, projected "
                           "to this TPU size")
                rows.append((f"{puzzle_id} [{where}] · {tag}", c))
        lines += cost.table(rows)[:-1] if rows else []
        lines += [f"{puzzle_id} [{report.config}] · not projected: {report.not_projected}"
                  for report in runs if report.not_projected]
    if not lines:
        return ["no kernel ran with its work counted"]
    return lines + cost.table([])[-1:]


def cost_lines(puzzle_id: str, reports) -> list[str]:
    """A solved performance puzzle's cost on a TPU: its tpu configuration projected where
    --cost did, else the line of its test that moved the most bytes (the most realistic
    of its configurations)."""
    measured = [[c for c in report.cost if c.whose != "reference"] or report.cost
                for report in reports if report.puzzle == puzzle_id and report.cost]
    if not measured:
        return []
    chosen = max(measured, key=lambda costs: (any(c.projected for c in costs),
                                              sum(c.bytes for c in costs)))
    return cost.summary(chosen)


def _no_hint_needed(screen: Screen, runs: dict) -> list[Line]:
    """--hint on puzzles that all pass: say so, and name the next puzzle."""
    solved = [pid for pid, run in runs.items() if run.status == "solved"]
    if not solved:
        return []
    stored = (screen.progress or {}).get("puzzles", {})
    unsolved = [p for p in screen.puzzles.values()
                if stored.get(p.id, {}).get("status") != "solved"
                and (p.id not in runs or runs[p.id].status != "solved")]
    following = next((p for p in unsolved if p.chapter == screen.puzzles[solved[0]].chapter),
                     unsolved[0] if unsolved else None)
    return [(f"✓ {', '.join(solved)}: solved, so no hint needed."
             + (f" Next: {screen.command(following, hint=False)}" if following else
                " Every puzzle is solved."), "green")]
