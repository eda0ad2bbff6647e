"""``pallas watch [CHAPTER] [PUZZLE]``: re-checks the puzzle you saved, at every save.

Starting Python and importing JAX takes about a second; a puzzle's tests take a
fraction of that once JAX is loaded and its programs compiled. So the watcher
keeps one process: it polls ``exercises/*.py`` and, when a chapter file is
saved, runs pytest *in this process* on the puzzle whose code the save changed
(its functions, and the functions they call, compared before and after the
save; with several, the one being worked on if it is among them, else the
first), exactly as
``pytest exercises/test_<chapter>.py -k <puzzle>`` would (same plugin, same
checks, same progress file), then redraws, all through ``terminal.Screen``:

    while it runs: which puzzle is being checked, and why
    then: the puzzle's block, as pytest's summary prints it (or "✓ solved")
    one progress line
    save to check · h hint · n next · p previous · a chapter · r replay · q quit

Keys are read between checks. One pressed during a check acts as soon as the
check ends (``q`` quits then); any more pressed during it are dropped, and the
screen says so: none is replayed later.

Between runs the learner's modules and the test modules are dropped from
``sys.modules``, so every run imports the file as saved; compiled programs are
cached by their program text, so a stale one never answers for new code. A
syntax error or an exception in the file is a diagnosis, never the watcher's
end. A kernel that hangs is stopped by a bound of the watcher's own
(``--pallas-timeout``, 20 s), and the check stops at the first configuration
that ran out of time.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import gc
import io
import os
import select
import sys
import time
from pathlib import Path

from . import catalogue, scoreboard, terminal

POLL = 0.05      # seconds between looks at the files and the keyboard
BOUND = 20.0     # seconds a test may run in watch mode (pytest's own default is 120)


class Watcher:
    """One learner's session: which puzzle is current, and a run of pytest per check."""

    def __init__(self, root: Path, chapter: str | None = None, puzzle: str | None = None,
                 out=None, pytest_args: tuple = (), bound: float = BOUND):
        self.root, self.out, self.pytest_args = root, out or sys.stdout, tuple(pytest_args)
        self.bound = bound
        self.kit = catalogue.load(root)
        self.screen = terminal.Screen(root, self.kit, here=Path.cwd(), keys=True)
        named = _named(self.kit, chapter, puzzle)
        chapter = chapter or (named.chapter if named else next(iter(self.kit)))
        self.current = named or self._first_unsolved(chapter)
        self.seen = _mtimes(root)
        self.functions = {path: _functions(Path(path)) for path in self.seen}
        self.keys = None          # the keyboard (a file with a fileno), None at its end
        self.notes: list[str] = []   # lines shown atop the next verdict
        self.queued = ""          # the key pressed during the last check: it acts next
        self.seed: str | None = None   # the inputs of the last failure (r)
        self.done = False

    # -- one check
    def check(self, puzzles: list, *, hint: bool = False, seed: str | None = None,
              changed=()) -> tuple | None:
        """Runs pytest in this process on ``puzzles`` (all of one chapter); returns its
        outcome and reports, or None when pytest itself could not run (said on the
        screen)."""
        import pytest

        from . import plugin

        self._draw(self.notes + self.screen.checking(puzzles, changed, self.bound))
        chapter = puzzles[0].chapter
        names = " or ".join(p.name for p in puzzles)
        args = [str(self.root / "exercises" / f"test_{chapter}.py"), "-k", names,
                "--rootdir", str(self.root), "-c", str(self.root / "pyproject.toml"), "-q",
                "-p", "no:randomly", "--pallas-timeout", f"{self.bound:g}",
                *(["--hint"] if hint else []), *self.pytest_args,
                *(["--seed", seed] if seed is not None else [])]
        grab = _InProcess()
        _forget_modules(self.root)
        quiet = io.StringIO()
        try:
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), \
                    plugin.nested_run():
                status = pytest.main(args, plugins=[grab])
        except Exception as error:   # pytest itself failed: say it, keep watching
            self._draw(self.screen.could_not_run(f"{type(error).__name__}: {error}"))
            return None
        finally:
            self._keys_pressed_during()
        if status == pytest.ExitCode.INTERRUPTED:   # Ctrl-C during the check
            self.done = True
            return None
        if grab.outcome is None:
            self._draw(self.screen.could_not_run(
                f"pytest exit {int(status)}", quiet.getvalue().strip().splitlines()[-8:]))
            return None
        return grab.outcome, grab.reports

    def run(self, puzzles: list, *, hint: bool = False, seed: str | None = None,
            changed=()) -> None:
        """Checks ``puzzles`` and draws the verdict."""
        checked = self.check(puzzles, hint=hint, seed=seed, changed=changed)
        if checked is not None:
            outcome, reports = checked
            self.screen.progress = outcome.progress   # the hint levels seen, for "press h"
            failed = [run.first_failure for run in outcome.runs.values() if run.first_failure]
            self.seed = next((str(f.seed) for f in failed if f.seed is not None), self.seed)
            self._draw(self.notes + self.screen.verdict(
                outcome, puzzles, self.current, hint=hint, reports=reports,
                following=self._step(self.current, +1)))
            self.notes = []
        _collect_garbage()

    # -- the keys
    def key(self, key: str) -> None:
        """Acts on one key."""
        if key == "q":
            self.done = True
        elif key in "np":
            following = self._step(self.current, +1 if key == "n" else -1)
            if following is None:
                self._print(self.screen.no_further(self.current, key))
                return
            self.current = following
            self.notes.append(self.screen.moved(following, key))
            self.run([following])
        elif key == "a":
            self.run(list(self.kit[self.current.chapter].puzzles))
        elif key == "h":
            self.run([self.current], hint=True)   # as `pytest --hint` does
        elif key == "r":
            if self.seed is None:
                self._print(self.screen.nothing_to_replay())
            else:
                self.run([self.current], seed=self.seed)
        else:
            self._print(self.screen.unknown_key(key))

    # -- the loop
    def loop(self, keys=None) -> int:
        """Checks the current puzzle, then watches the files and the keyboard until q."""
        self.keys = keys if keys is not None else sys.stdin
        with _cbreak(self.keys):
            self.run([self.current])
            while not self.done:
                saved = self._saved()
                if saved is not None:
                    self.current, changed = saved
                    self.run([self.current], changed=changed)
                    continue
                key, self.queued = self.queued or self._read_key(), ""
                if key:
                    self.key(key)
        return 0

    # -- the pieces
    def _saved(self) -> tuple | None:
        """The puzzle a save changed, and the functions it changed, if a chapter file
        was saved: the puzzle being worked on if its code changed, else the first puzzle
        whose code changed; when no function changed (a comment, an import, a syntax
        error), the puzzle being worked on (another chapter's first unsolved one, when
        that chapter's file was saved)."""
        now = _mtimes(self.root)
        changed = [path for path, mtime in now.items() if self.seen.get(path) != mtime]
        self.seen = now
        for path in changed:
            chapter = Path(path).stem
            if chapter not in self.kit:
                continue
            before, after = self.functions.get(path), _functions(Path(path))
            if after is not None:   # a syntax error: compare the next save with the last good one
                self.functions[path] = after
            names = _changed(before, after)
            touched = [p for p in self.kit[chapter].puzzles if names & _code_of(p, after or {})]
            # The puzzle being worked on, when the save changed its code (a function it
            # shares with an earlier puzzle, say); else the first the save changed.
            puzzle = self.current if self.current in touched else next(iter(touched), None)
            if puzzle is None:
                puzzle = self.current if self.current.chapter == chapter else \
                    self._first_unsolved(chapter)
            code = _code_of(puzzle, after or {})
            others = [p for p in touched if p is not puzzle]
            if others:
                self.notes.append(self.screen.also_changed(others))
            return puzzle, [name for name in sorted(names) if name in code]
        return None

    def _keys_pressed_during(self) -> None:
        """After a check: the first key pressed during it acts next, q quits; any more
        are dropped, said."""
        pressed = [k for k in _drain(self.keys) if not k.isspace()]
        if "q" in pressed:
            self.done = True
        elif pressed:
            self.queued = pressed[0]
            if pressed[1:]:
                self.notes.append(self.screen.dropped(pressed[0], "".join(pressed[1:])))

    def _read_key(self) -> str:
        """A key if one came within POLL, else "" (at the end of input, the keyboard is
        no longer read)."""
        if self.keys is None:
            time.sleep(POLL)
            return ""
        try:
            ready, _, _ = select.select([self.keys], [], [], POLL)
            if not ready:
                return ""
            data = os.read(self.keys.fileno(), 1)
        except (ValueError, OSError):
            data = b""
        if not data:
            self.keys = None
            return ""
        return data.decode(errors="replace").strip().lower()

    def _step(self, puzzle, by: int):
        """The puzzle ``by`` places on in its chapter (n, p), or None past an end."""
        order = list(self.kit[puzzle.chapter].puzzles)
        place = order.index(puzzle) + by
        return order[place] if 0 <= place < len(order) else None

    def _first_unsolved(self, chapter: str):
        stored = scoreboard.load(self.root)[0]["puzzles"]
        puzzles = list(self.kit[chapter].puzzles)
        todo = [p for p in puzzles if stored.get(p.id, {}).get("status") != "solved"]
        return todo[0] if todo else puzzles[0]

    def _draw(self, lines: list[str]) -> None:
        """A fresh screen (on a terminal) with ``lines``."""
        if getattr(self.out, "isatty", lambda: False)():
            self.out.write("\033[2J\033[H")
        self._print("\n".join(lines))

    def _print(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()


def _collect_garbage() -> None:
    """Between checks, while the learner reads: the garbage of the last check collected,
    and what lives on (JAX, the kit, compiled programs: hundreds of MB of objects) set
    aside from the collector, so that a collection during a check (pytest makes one
    at its end, to report unraisable exceptions) walks only what that check made."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def _functions(path: Path) -> dict[str, tuple[str, frozenset]] | None:
    """A chapter file's top-level functions: name -> (its code, as a syntax tree without
    positions, so a comment or a blank line changes nothing; the names it reads), or
    None when the file does not parse."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):   # a later definition replaces an earlier one
            reads = frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
            found[node.name] = (ast.dump(node), reads)
    return found


def _changed(before: dict | None, after: dict | None) -> set[str]:
    """The functions whose code differs between two states of a file."""
    if before is None or after is None:
        return set()
    return {name for name in before.keys() | after.keys()
            if before.get(name, ("",))[0] != after.get(name, ("",))[0]}


def _code_of(puzzle, functions: dict) -> set[str]:
    """A puzzle's functions and every function of the file they call, however deep."""
    code, todo = set(), [name for name in puzzle.edit]
    while todo:
        name = todo.pop()
        if name in code:
            continue
        code.add(name)
        todo += [n for n in functions.get(name, ("", ()))[1] if n in functions]
    return code


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


class _InProcess:
    """A plugin of the in-process run: hands back the run's outcome and reports, and
    ends the run at the first test that ran out of time (its other configurations
    would each wait as long)."""

    def __init__(self):
        self.outcome, self.reports, self.session = None, [], None

    def pytest_sessionstart(self, session):
        self.session = session

    def pytest_runtest_logreport(self, report):
        record = getattr(report, "pallas", None)
        if record is not None and record.kind == "hang" and self.session is not None:
            self.session.shouldfail = "a kernel ran out of time"

    def pytest_sessionfinish(self, session):
        run = session.config.pluginmanager.get_plugin("pallas-controller")
        self.outcome = getattr(run, "outcome", None)
        self.reports = list(getattr(run, "reports", ()))


def _drain(keys) -> str:
    """Every key pressed and not read yet."""
    text = b""
    while keys is not None:
        try:
            if not select.select([keys], [], [], 0)[0]:
                break
            chunk = os.read(keys.fileno(), 1024)
        except (ValueError, OSError):
            break
        if not chunk:
            break
        text += chunk
    return text.decode(errors="replace").lower()


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
        prog="pallas watch", description="Re-check the puzzle you save, at every save.")
    parser.add_argument("chapter", nargs="?", help="a chapter (default: where you left off)")
    parser.add_argument("puzzle", nargs="?", help="a puzzle of it to start with (default: "
                                                  "the first unsolved)")
    parser.add_argument("--root", type=Path, default=None,
                        help="the kit's folder (default: this folder or the one above it)")
    parser.add_argument("--pallas-timeout", type=float, default=BOUND, metavar="SECONDS",
                        help="stop a check whose kernel runs longer than this, and the check "
                             f"with it (default {BOUND:g}; pytest's own default is 120)")
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
    if args.pallas_timeout <= 0:
        parser.error("--pallas-timeout: give a number of seconds > 0")
    extra = ("--seed", args.seed) if args.seed is not None else ()
    watcher = Watcher(root, args.chapter, args.puzzle, pytest_args=extra,
                      bound=args.pallas_timeout)
    with contextlib.suppress(KeyboardInterrupt):
        watcher.loop()
    runtime = sys.modules.get("pytest_pallas_hints.runtime")
    if runtime is not None and runtime.left_threads_behind():
        # A kernel on several simulated chips ended by the time bound may have left a
        # chip's thread waiting, and JAX would wait for it at exit: end the process now.
        runtime.exit_now(0)
    return 0
