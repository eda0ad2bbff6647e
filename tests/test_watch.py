"""`pallas watch`, driven as a learner drives it: a real exercise file edited on disk,
keys typed on a terminal (a pseudo-terminal), the screen read from it."""
import fcntl
import io
import json
import os
import pty
import queue
import re
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from pytest_pallas_hints import catalogue, watch as watcher

ROOT = Path(__file__).resolve().parent.parent
SOLVED = (ROOT / "reference" / "basics.py").read_text()
KEYS = "r replay · q quit"   # the last line of every verdict: what to press
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

ADD_ONE = """def add_one(x):
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)
"""
assert ADD_ONE in SOLVED
HANG = SOLVED.replace(ADD_ONE, """def add_one(x):
    def waits(x_ref, o_ref, sem):
        pl.semaphore_wait(sem, 1)   # nothing ever signals it: on a TPU, a hang
        o_ref[...] = x_ref[...] + 1

    return pl.pallas_call(waits, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.SemaphoreType.REGULAR])(x)
""")


class Session:
    """A `pallas watch` process on a pseudo-terminal (80 columns) in a copy of the kit:
    keys written to it as typed, its screen read line by line (screen clears removed)."""

    def __init__(self, path: Path, *args: str):
        master, terminal = pty.openpty()
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 80, 0, 0))
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("COLUMNS", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pytest_pallas_hints", "watch", *args], cwd=path, env=env,
            stdin=terminal, stdout=terminal, stderr=terminal, start_new_session=True)
        os.close(terminal)
        self.master = master
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        pending = ""
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:   # the process ended and closed the terminal
                break
            if not chunk:
                break
            *done, pending = (pending + chunk.decode(errors="replace")).split("\n")
            for line in done:
                self.lines.put(ESCAPES.sub("", line).rstrip("\r"))

    def wait_for(self, text: str, seconds: float = 120) -> list[str]:
        """The lines up to the first that contains ``text`` (read since the last wait)."""
        end, got = time.monotonic() + seconds, []
        while time.monotonic() < end:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                assert self.process.poll() is None, "the watcher ended:\n" + "\n".join(got)
                continue
            got.append(line)
            self.seen.append(line)
            if text in line:
                return got
        raise AssertionError(f"no {text!r} within {seconds} s; got:\n" + "\n".join(got))

    def quiet_for(self, seconds: float) -> list[str]:
        """Whatever the screen showed in the next ``seconds`` (nothing, when idle)."""
        time.sleep(seconds)
        got = []
        while not self.lines.empty():
            got.append(self.lines.get())
        self.seen += got
        return got

    def key(self, keys: str):
        os.write(self.master, keys.encode())

    def close(self) -> int:
        self.key("q")
        code = self.process.wait(timeout=60)
        os.close(self.master)
        return code


def save(path: Path, text: str):
    """Writes a file as an editor saves it, with a modification time the watcher sees."""
    path.write_text(text)
    stamp = time.time() + save.count
    save.count += 1
    os.utime(path, (stamp, stamp))


save.count = 1


@pytest.fixture
def watch(kit):
    started = []

    def start(*args):
        session = Session(kit.path, *args)
        started.append(session)
        return session
    yield start
    for session in started:
        if session.process.poll() is None:
            session.process.kill()


def caret_under(lines: list[str], row: str) -> str:
    """The text the caret line under the row starting with ``row`` points at."""
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(row))
    code, carets = lines[at], lines[at + 1]
    assert set(carets.strip()) == {"^"}, carets
    start = carets.index("^")
    return code[start:start + len(carets.strip())]


def test_a_learners_session_edits_a_file_and_reads_each_verdict(kit, watch):
    kit.only("basics")
    exercise = kit.path / "exercises" / "basics.py"
    session = watch("basics", "--pallas-timeout", "3")
    shown = session.wait_for(KEYS)
    assert "· basics.add_one  not started — edit exercises/basics.py:60 add_one(), " \
           ":44 add_one_kernel()" in shown

    session.key("h")                                          # a hint, as --hint gives it
    shown = session.wait_for(KEYS)
    assert any("hint 1 of 3 · the idea" in line for line in shown)

    save(exercise, "def add_one(x):\n    return x +* 2\n")   # a syntax error mid-edit
    shown = session.wait_for(KEYS)
    assert "✗ basics  (all 9 puzzles)" in shown
    assert any("exercises/basics.py:2 does not import: SyntaxError" in line for line in shown)
    assert caret_under(shown, "at ") == "*"

    save(exercise, HANG)                                      # a kernel that never ends
    session.wait_for("… checking basics.add_one")
    started = time.monotonic()
    session.key("nh")                                         # keys pressed while it hangs
    shown = session.wait_for(KEYS, seconds=60)
    assert time.monotonic() - started < 20                    # one configuration, 3 s
    assert any("the kernel never finished" in line for line in shown)
    assert any(line.strip().startswith("stopped    a check stops at the first configuration")
               for line in shown)
    assert "dropped h: one key acts after a check (n did); press again what you meant" in shown
    shown = session.wait_for(KEYS)                            # n acted, h was dropped
    assert "n: next puzzle, basics.tiled (puzzle 2 of 9 in basics)" in shown
    assert "… checking basics.tiled" in shown
    assert "✓ basics.tiled  solved · +10 points" in shown
    assert session.quiet_for(1.5) == []                       # nothing replayed later

    session.key("p")
    shown = session.wait_for(KEYS, seconds=60)
    assert "p: previous puzzle, basics.add_one (puzzle 1 of 9 in basics)" in shown
    assert "… checking basics.add_one" in shown

    save(exercise, SOLVED)                                    # solved
    shown = session.wait_for(KEYS)
    assert "… checking basics.add_one   (you changed add_one())" in shown
    assert "✓ basics.add_one  solved · +10 points" in shown
    assert "next: basics.tiled (press n)" in shown
    assert any(line.startswith("Pallas exercises · 2 of 9 puzzles · 20 / 90 points")
               for line in shown)

    session.key("n")                                          # n then p, as the screen says
    shown = session.wait_for(KEYS)
    assert "✓ basics.tiled  solved" in shown
    session.key("p")
    shown = session.wait_for(KEYS)
    assert "p: previous puzzle, basics.add_one (puzzle 1 of 9 in basics)" in shown
    assert "✓ basics.add_one  solved" in shown

    broken = SOLVED.replace("lambda i: (n - 1 - i, 0)", "lambda i: (i, 0)")
    save(exercise, broken)                                    # another puzzle, saved
    shown = session.wait_for(KEYS)
    assert "… checking basics.reverse   (you changed reverse_blocks())" in shown
    failure = next(line for line in shown if line.startswith("✗ basics.reverse"))
    seed = re.search(r"seed (\d+)", failure)[1]
    assert f"  replay     press r   (the same inputs again, seed {seed})" in shown
    assert "  more       press h   (hint 1 of 3)" in shown

    typo = broken.replace("jnp.sum(x_ref[...], axis=1", "jnp.sum(x_reff[...], axis=1")
    save(exercise, typo)                                      # a typo in row_sum's kernel
    shown = session.wait_for(KEYS)
    assert "… checking basics.row_sum   (you changed row_sum_kernel())" in shown
    assert any("`x_reff` is defined nowhere in this file and is no builtin: a typo?" in line
               for line in shown)
    assert any("Did you mean `x_ref`?" in line for line in shown)
    assert caret_under(shown, "at ") == "x_reff"

    session.key("a")                                          # the chapter: only it fails
    shown = session.wait_for(KEYS)
    failed = [line.split()[1] for line in shown if line.startswith("✗ ")]
    assert failed == ["basics.reverse", "basics.row_sum"]
    assert sum(line.startswith("✓ basics.") for line in shown) == 7
    assert sum("`x_reff` is defined nowhere" in line for line in shown) == 1
    assert session.close() == 0

    assert not any("pytest " in line or "save again" in line for line in session.seen)
    progress = json.loads((kit.path / ".pallas_progress.json").read_text())["puzzles"]
    assert progress["basics.add_one"]["status"] == progress["basics.tiled"]["status"] == "solved"
    assert progress["basics.row_sum"]["status"] != "solved"


def test_the_watchers_verdict_is_pytests_for_the_same_code_and_seed(kit, watch):
    kit.only("basics")
    wrong = (ROOT / "tests" / "mistakes" / "basics" / "tiled_one_index.py").read_text()
    save(kit.path / "exercises" / "basics.py", SOLVED + "\n" + wrong)
    out = kit.run("exercises/test_basics.py", "-k", "tiled", "--seed", "4321",
                  subprocess=True).stdout.lines
    start = next(i for i, line in enumerate(out) if line.startswith("✗ basics.tiled"))
    block = out[start:out.index("", start)]
    verdict = block[:next(i for i, line in enumerate(block) if line.startswith("  replay"))]

    session = watch("basics", "tiled", "--seed", "4321")
    shown = session.wait_for(KEYS)
    assert session.close() == 0
    first = shown.index(block[0])
    assert shown[first:first + len(verdict)] == verdict       # header, facts, diagnosis
    assert shown[first + len(verdict)].startswith("  replay     press r   (")   # keys, not
    assert shown[first + len(verdict) + 1].startswith("  more       press h   (")  # commands


def test_a_solved_performance_puzzle_prints_its_cost_line_as_pytest_does(kit, watch):
    kit.only("basics", "matmul")
    save(kit.path / "exercises" / "matmul.py", (ROOT / "reference" / "matmul.py").read_text())
    out = kit.run("exercises/test_matmul.py", "-k", "k_accumulate", subprocess=True).stdout.lines
    solved = out.index("✓ matmul.k_accumulate  solved · +15 points")
    cost = out[solved + 1]
    assert "on TPU v6e" in cost

    (kit.path / ".pallas_progress.json").unlink()
    session = watch("matmul", "k_accumulate")
    shown = session.wait_for(KEYS)
    assert session.close() == 0
    assert shown[shown.index(out[solved]) + 1] == cost


def test_a_save_checks_the_puzzle_whose_code_it_changed(kit):
    """Which puzzle a save checks: the first whose functions (or the functions they call)
    changed; the one being worked on when it is among them; with no function changed,
    the one being worked on."""
    kit.only("basics")
    exercise = kit.path / "exercises" / "basics.py"
    save(exercise, SOLVED)
    kit_chapters = catalogue.load(kit.path)
    puzzles = {p.name: p for p in kit_chapters["basics"].puzzles}
    seen = watcher.Watcher(kit.path, "basics", "add_one", out=io.StringIO())

    save(exercise, SOLVED.replace("(n - 1 - i, 0)", "(i, 0)").replace(
        "x_ref[...] + y_ref[...]", "y_ref[...] + x_ref[...]"))
    assert seen._saved() == (puzzles["reverse"], ["reverse_blocks"])
    assert seen.notes == ["also changed: basics.grid_2d, basics.outer_add (a: check the chapter)"]

    seen.notes, seen.current = [], puzzles["outer_add"]       # add_kernel: shared
    save(exercise, SOLVED.replace("(n - 1 - i, 0)", "(i, 0)"))
    assert seen._saved() == (puzzles["outer_add"], ["add_kernel"])

    save(exercise, SOLVED.replace("(n - 1 - i, 0)", "(i, 0)") + "\n# a comment\n")
    assert seen._saved() == (puzzles["outer_add"], [])        # no function changed
    save(exercise, "def add_one(x:\n")
    assert seen._saved() == (puzzles["outer_add"], [])        # no function to compare
    save(exercise, SOLVED)                                    # against the last good save
    assert seen._saved() == (puzzles["reverse"], ["reverse_blocks"])
    assert seen._saved() is None                              # nothing saved since


def test_n_and_p_stay_in_the_chapter_and_say_so_at_its_ends(kit):
    kit.only("basics", "matmul")
    out = io.StringIO()
    seen = watcher.Watcher(kit.path, "basics", "add_one", out=out)
    checked = []
    seen.run = lambda puzzles, **how: checked.append([p.id for p in puzzles])
    seen.key("p")
    assert out.getvalue() == "p: basics.add_one is the first puzzle of basics\n"
    seen.key("n")
    assert checked == [["basics.tiled"]]
    assert seen.notes == ["n: next puzzle, basics.tiled (puzzle 2 of 9 in basics)"]
    seen.current = seen.kit["basics"].puzzles[-1]
    seen.key("n")
    assert out.getvalue().splitlines()[-1] == (
        "n: basics.outer_relu_grad is the last puzzle of basics (the next chapter, matmul, "
        "is checked when you save exercises/matmul.py)")
    seen.key("a")
    assert checked[-1] == [p.id for p in seen.kit["basics"].puzzles]


def test_a_bad_chapter_or_command_is_a_usage_error_naming_the_valid_ones(kit):
    kit.only("basics")
    run = [sys.executable, "-m", "pytest_pallas_hints"]
    done = subprocess.run([*run, "watch", "nope"], cwd=kit.path, capture_output=True, text=True)
    assert done.returncode == 2 and "no chapter 'nope'; the chapters: basics" in done.stderr
    done = subprocess.run([*run, "watch", "--pallas-timeout", "0"], cwd=kit.path,
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--pallas-timeout: give a number of seconds > 0" in done.stderr
    done = subprocess.run([*run, "wach"], cwd=kit.path, capture_output=True, text=True)
    assert done.returncode == 2 and "watch" in done.stderr
