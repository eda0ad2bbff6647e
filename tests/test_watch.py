"""`pallas watch`, driven as a learner drives it: a real exercise file edited on disk,
keys typed, the terminal output read."""
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

HANG = '''import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def add_one_kernel(x_ref, o_ref, sem):
    pl.semaphore_wait(sem, 1)   # nothing ever signals it: on a TPU, a hang
    o_ref[...] = x_ref[...] + 1


def add_one(x):
    return pl.pallas_call(add_one_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.SemaphoreType.REGULAR])(x)
'''


class Session:
    """A `pallas watch` process in a copy of the kit, its output read line by line."""

    def __init__(self, path: Path, *args: str):
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pytest_pallas_hints", "watch", *args], cwd=path, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

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

    def key(self, key: str):
        self.process.stdin.write(key + "\n")
        self.process.stdin.flush()

    def close(self) -> int:
        self.key("q")
        return self.process.wait(timeout=60)


def save(path: Path, text: str):
    """Writes a file as an editor saves it, with a modification time the watcher sees."""
    path.write_text(text)
    stamp = time.time() + 1
    os.utime(path, (stamp, stamp))


@pytest.fixture
def watch(kit):
    kit.only("basics")
    started = []

    def start(*args):
        session = Session(kit.path, *args)
        started.append(session)
        return session
    yield start
    for session in started:
        if session.process.poll() is None:
            session.process.kill()


def test_a_learners_session_edits_a_file_and_reads_each_verdict(kit, watch):
    exercise = kit.path / "exercises" / "basics.py"
    session = watch("basics", "--pallas-timeout", "3")
    session.wait_for("basics.add_one  not started")
    session.wait_for("h next hint")

    session.key("h")                                          # a hint, as --hint gives it
    shown = session.wait_for("h next hint")
    assert any("hint 1 of 3 · the idea" in line for line in shown)

    save(exercise, "def add_one(:\n")                         # a syntax error mid-edit
    shown = session.wait_for("h next hint")
    assert any("does not import: SyntaxError" in line for line in shown)

    save(exercise, HANG)                                      # a kernel that never ends
    started = time.monotonic()
    shown = session.wait_for("h next hint", seconds=60)
    assert any("the kernel never finished" in line for line in shown)
    assert time.monotonic() - started < 30

    save(exercise, (ROOT / "reference" / "basics.py").read_text())   # solved
    shown = session.wait_for("h next hint")
    assert "✓ basics.add_one  solved · +10 points" in shown
    assert any(line.startswith("next: basics.tiled") for line in shown)
    assert any(re.match(r"Pallas exercises · 1 of 9 puzzles · 10 / 90 points", line)
               for line in shown)

    save(exercise, exercise.read_text())                      # the next puzzle, on a save
    shown = session.wait_for("h next hint")
    assert "✓ basics.tiled  solved · +10 points" in shown
    assert session.close() == 0

    progress = json.loads((kit.path / ".pallas_progress.json").read_text())["puzzles"]
    assert progress["basics.add_one"]["status"] == progress["basics.tiled"]["status"] == "solved"


def test_the_watchers_verdict_is_pytests_for_the_same_code_and_seed(kit, watch):
    wrong = (ROOT / "tests" / "mistakes" / "basics" / "tiled_one_index.py").read_text()
    save(kit.path / "exercises" / "basics.py",
         (ROOT / "reference" / "basics.py").read_text() + "\n" + wrong)
    out = kit.run("exercises/test_basics.py", "-k", "tiled", "--seed", "4321",
                  subprocess=True).stdout.lines
    start = next(i for i, line in enumerate(out) if line.startswith("✗ basics.tiled"))
    block = out[start:out.index("", start)]

    session = watch("basics", "tiled", "--seed", "4321")
    shown = session.wait_for("h next hint")
    assert session.close() == 0
    first = shown.index(block[0])
    assert shown[first:first + len(block)] == block


def test_a_bad_chapter_or_command_is_a_usage_error_naming_the_valid_ones(kit):
    run = [sys.executable, "-m", "pytest_pallas_hints"]
    done = subprocess.run([*run, "watch", "nope"], cwd=kit.path, capture_output=True, text=True)
    assert done.returncode == 2 and "no chapter 'nope'; the chapters: basics, matmul" in done.stderr
    done = subprocess.run([*run, "wach"], cwd=kit.path, capture_output=True, text=True)
    assert done.returncode == 2 and "watch" in done.stderr
