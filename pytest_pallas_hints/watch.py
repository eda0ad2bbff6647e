"""``pallas watch [CHAPTER] [PUZZLE]``: re-checks the puzzle you work on at every save.

Starting Python and importing JAX takes about a second; a puzzle's tests take a
fraction of that once JAX is loaded and its programs compiled. So the watcher
keeps one process: it polls ``exercises/*.py`` and, when a chapter file is
saved, runs pytest *in this process* on the puzzle being worked on (the one
named, else the first unsolved one of the saved file), exactly as
``pytest exercises/test_<chapter>.py -k <puzzle>`` would (same plugin, same
checks, same progress file), then redraws:

    the puzzle's block, as pytest's summary prints it (or "✓ solved")
    one progress line
    h next hint · n next puzzle · a whole chapter · q quit

Between runs the learner's modules and the test modules are dropped from
``sys.modules``, so every run imports the file as saved; compiled programs are
cached by their program text, so a stale one never answers for new code. A
syntax error or an exception in the file is a diagnosis, never the watcher's
end; a kernel that hangs is bounded by ``--pallas-timeout`` as under pytest.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import select
import sys
import time
from pathlib import Path

from . import catalogue, scoreboard, terminal

KEYS = "h next hint · n next puzzle · a whole chapter · q quit"
POLL = 0.05   # seconds between looks at the files and the keyboard


class Watcher:
    """One learner's session: which puzzle is current, and a run of pytest per check."""

    def __init__(self, root: Path, chapter: str | None = None, puzzle: str | None = None,
                 out=None, pytest_args: tuple = ()):
        self.root, self.out, self.pytest_args = root, out or sys.stdout, tuple(pytest_args)
        self.kit = catalogue.load(root)
        self.screen = terminal.Screen(root, self.kit, here=Path.cwd())
        self.named = _named(self.kit, chapter, puzzle)
        chapter = chapter or (self.named.chapter if self.named else next(iter(self.kit)))
        self.current = self.named or self._first_unsolved(chapter)
        self.seen = _mtimes(root)

    # -- one check
    def check(self, puzzles: list, *, hint: bool = False) -> scoreboard.Outcome | None:
        """Runs pytest in this process on ``puzzles`` (all of one chapter) and returns its
        outcome, or None when pytest itself could not run (said on the screen)."""
        import pytest

        chapter = puzzles[0].chapter
        names = " or ".join(p.name for p in puzzles)
        args = [str(self.root / "exercises" / f"test_{chapter}.py"), "-k", names,
                "--rootdir", str(self.root), "-c", str(self.root / "pyproject.toml"), "-q",
                "-p", "no:randomly", *(["--hint"] if hint else []), *self.pytest_args]
        grab = _Outcome()
        _forget_modules(self.root)
        quiet = io.StringIO()
        try:
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                status = pytest.main(args, plugins=[grab])
        except Exception as error:   # pytest itself failed: say it, keep watching
            self._print(f"! the check could not run: {type(error).__name__}: {error}")
            return None
        if grab.outcome is None:
            self._print(f"! the check could not run (pytest exit {int(status)}):")
            self._print("\n".join(quiet.getvalue().strip().splitlines()[-8:]))
        return grab.outcome

    # -- what the learner sees
    def show(self, outcome, puzzles: list, levels: list[int] = ()) -> None:
        self._clear()
        self.screen.progress = outcome.progress
        runs = outcome.runs
        shown_broken = set()
        for puzzle in puzzles:
            run = runs.get(puzzle.id)
            if run is None:
                self._print(f"· {puzzle.id}  did not run (no test selected)")
            elif run.status == "solved":
                points = "" if puzzle.id not in outcome.newly_solved else \
                    f" · +{puzzle.points} points"
                self._print(f"✓ {puzzle.id}  solved{points}")
            elif run.status == "broken":
                if puzzle.chapter not in shown_broken:
                    shown_broken.add(puzzle.chapter)
                    self._print("\n".join(self.screen.broken(puzzle.chapter, runs)))
            elif run.failed or run.kit_errors:
                self._print("\n".join(self.screen.puzzle(run)))
            else:
                self._print(f"· {puzzle.id}  {run.status.replace('_', ' ')}")
        for level in levels:
            self._print("\n".join(self.screen.hint_lines(self.current, level)))
        self._print("")
        self._print(_progress_line(self.screen, outcome, self.current.chapter))
        following = self._first_unsolved(self.current.chapter, after=self.current)
        if runs.get(self.current.id) and runs[self.current.id].status == "solved" \
                and following is not None:
            self._print(f"next: {following.id} (press n, or save again)")
        self._print(f"{KEYS}   (watching exercises/{self.current.chapter}.py)")

    def run_current(self) -> scoreboard.Outcome | None:
        outcome = self.check([self.current])
        if outcome is not None:
            self.show(outcome, [self.current])
            run = outcome.runs.get(self.current.id)
            if run and run.status == "solved" and not self.named:
                self.current = self._first_unsolved(self.current.chapter,
                                                    after=self.current) or self.current
        return outcome

    # -- the keys
    def key(self, key: str) -> bool:
        """Acts on one key; False to quit."""
        if key == "q":
            return False
        if key == "n":
            self.named = None
            order = list(catalogue.puzzles(self.kit).values())
            self.current = order[(order.index(self.current) + 1) % len(order)]
            self.run_current()
        elif key == "a":
            chapter = self.kit[self.current.chapter].puzzles
            outcome = self.check(list(chapter))
            if outcome is not None:
                self.show(outcome, [p for p in chapter if not (
                    p.id in outcome.runs and outcome.runs[p.id].status == "solved")] or
                    [self.current])
        elif key == "h":
            outcome = self.check([self.current], hint=True)   # as `pytest --hint` does
            if outcome is not None:
                self.show(outcome, [self.current], outcome.hint_levels.get(self.current.id, []))
        return True

    # -- the loop
    def loop(self, keys=None) -> int:
        """Checks the current puzzle, then watches the files and the keyboard until q."""
        keys = keys if keys is not None else sys.stdin
        self._print(f"pallas watch: {self.current.id} (save exercises/"
                    f"{self.current.chapter}.py to check it again)")
        self.run_current()
        with _cbreak(keys):
            while True:
                saved = self._saved_chapter()
                if saved is not None:
                    if not self.named and saved != self.current.chapter:
                        self.current = self._first_unsolved(saved)
                    self.run_current()
                key = _read_key(keys, POLL)
                if key == "":   # end of input: nothing more will come from the keyboard
                    keys = None
                    time.sleep(POLL)
                elif key and not self.key(key.strip().lower()[:1] or " "):
                    return 0

    # -- the pieces
    def _saved_chapter(self) -> str | None:
        now = _mtimes(self.root)
        changed = [path for path, mtime in now.items() if self.seen.get(path) != mtime]
        self.seen = now
        names = [Path(p).stem for p in changed if Path(p).stem in self.kit]
        return names[0] if names else None


    def _first_unsolved(self, chapter: str, after=None):
        stored = scoreboard.load(self.root)[0]["puzzles"]
        puzzles = list(self.kit[chapter].puzzles)
        if after is not None:
            puzzles = puzzles[puzzles.index(after) + 1:] + puzzles[:puzzles.index(after)]
        todo = [p for p in puzzles if stored.get(p.id, {}).get("status") != "solved"]
        return todo[0] if todo else (None if after is not None else puzzles[0])

    def _clear(self) -> None:
        if getattr(self.out, "isatty", lambda: False)():
            self.out.write("\033[2J\033[H")

    def _print(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()


def _progress_line(screen: terminal.Screen, outcome, chapter: str) -> str:
    """'Pallas exercises · 3 of 44 puzzles · 30 / 720 points   basics ███░░░░░░░ 3/9'."""
    board = scoreboard.render(screen.kit, outcome.progress, outcome.runs, outcome.skipped,
                              screen.command)
    mine = next((line.strip() for line in board[1:] if line.strip().startswith(chapter + " ")),
                "")
    return board[0] + (f"   {' '.join(mine.split()[:3])}" if mine else "")


def _named(kit: dict, chapter: str | None, puzzle: str | None):
    """The puzzle asked for on the command line (``name`` or ``chapter.name``), if any."""
    if puzzle is None:
        return None
    wanted = puzzle if "." in puzzle else f"{chapter}.{puzzle}"
    found = catalogue.puzzles(kit).get(wanted)
    if found is None:
        raise SystemExit(f"pallas watch: no puzzle {wanted!r}; the puzzles of {chapter}: "
                         f"{', '.join(p.name for p in kit[chapter].puzzles)}")
    return found


def _mtimes(root: Path) -> dict[str, int]:
    """When each exercise file was last saved."""
    found = {}
    for path in (root / "exercises").glob("*.py"):
        try:
            found[str(path)] = path.stat().st_mtime_ns
        except OSError:
            continue
    return found


def _forget_modules(root: Path) -> None:
    """Drops the learner's and the tests' modules: the next run imports them afresh."""
    folders = {str(root / "exercises"), str(root / "reference")}
    for name, module in list(sys.modules.items()):
        where = os.path.dirname(getattr(module, "__file__", None) or "")
        if where in folders or name.split(".")[0] in ("exercises", "reference"):
            del sys.modules[name]


class _Outcome:
    """A plugin of the in-process run: hands back the run's outcome."""

    def __init__(self):
        self.outcome = None

    def pytest_sessionfinish(self, session):
        run = session.config.pluginmanager.get_plugin("pallas-controller")
        self.outcome = getattr(run, "outcome", None)


def _read_key(keys, timeout: float) -> str | None:
    """A key (or a line, off a terminal) if one came within ``timeout``; "" at the end
    of input; None when nothing came."""
    if keys is None:
        time.sleep(timeout)
        return None
    try:
        ready, _, _ = select.select([keys], [], [], timeout)
    except (ValueError, OSError):
        time.sleep(timeout)
        return None
    if not ready:
        return None
    return keys.read(1) if keys.isatty() else keys.readline()


@contextlib.contextmanager
def _cbreak(keys):
    """Keys without Enter on a terminal; nothing changed elsewhere."""
    if keys is None or not keys.isatty():
        yield
        return
    import termios
    import tty

    saved = termios.tcgetattr(keys)
    try:
        tty.setcbreak(keys)
        yield
    finally:
        termios.tcsetattr(keys, termios.TCSADRAIN, saved)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="pallas watch", description="Re-check the puzzle you work on at every save.")
    parser.add_argument("chapter", nargs="?", help="a chapter (default: where you left off)")
    parser.add_argument("puzzle", nargs="?", help="a puzzle of it (default: the first unsolved)")
    parser.add_argument("--root", type=Path, default=None,
                        help="the kit's folder (default: this folder or the one above it)")
    parser.add_argument("--pallas-timeout", type=float, default=None, metavar="SECONDS",
                        help="fail a test that runs longer than this, as pytest's option")
    parser.add_argument("--seed", default=None, metavar="N",
                        help="draw every check's inputs from seed N, as pytest's option")
    args = parser.parse_args(argv)
    root = args.root or next((p for p in (Path.cwd(), *Path.cwd().parents)
                              if catalogue.is_kit(p)), None)
    if root is None or not catalogue.is_kit(root):
        parser.error("run it inside the kit (the folder with exercises/hints/), or pass --root")
    kit = catalogue.load(root)
    if args.chapter and args.chapter not in kit:
        parser.error(f"no chapter {args.chapter!r}; the chapters: {', '.join(kit)}")
    extra = (*(("--pallas-timeout", str(args.pallas_timeout)) if args.pallas_timeout else ()),
             *(("--seed", args.seed) if args.seed is not None else ()))
    try:
        return Watcher(root, args.chapter, args.puzzle, pytest_args=extra).loop()
    except KeyboardInterrupt:
        return 0
