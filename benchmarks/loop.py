"""The learner's loop: from saving a file to reading the verdict, warm.

    python benchmarks/loop.py            # the table
    python benchmarks/loop.py --runs 7

For a basics, a flash and a pipelining puzzle, in a copy of the kit whose
exercise file holds the solution (a learner's run after the edit that solved
it), each beside the floor measured in the same run:

  floor    starting Python and importing JAX and Pallas: what any fresh process pays
  bare     pytest running one empty test in a file that imports JAX and Pallas, without
           the kit (`-p no:pallas_hints`): pytest's own share, before any puzzle
  pytest   `python -m pytest exercises/test_<chapter>.py -k <puzzle>`, warm (the
           compile cache primed by an earlier run): a fresh process per edit
  watch    `pallas watch`: the file is saved, the time until the verdict line is
           printed; JAX and the kit stay loaded, the compile cache is primed

Medians of --runs. Targets (issue 21): watch at most 0.5 s for the basics puzzle;
one puzzle through pytest at most 1.5x the floor.
"""
from __future__ import annotations

import argparse
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PUZZLES = [("basics", "add_one"), ("flash", "causal"), ("pipelining", "double_buffer")]
FLOOR = "import jax; from jax.experimental import pallas; from jax.experimental.pallas import tpu"
BARE_TEST = f"{FLOOR.replace('; ', chr(10))}\n\n\ndef test_nothing():\n    pass\n"


def kit_copy(where: Path) -> Path:
    """The kit with every exercise file solved (the reference copied over it)."""
    for folder in ("exercises", "reference", "pytest_pallas_hints"):
        shutil.copytree(ROOT / folder, where / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", where)
    for path in (where / "reference").glob("*.py"):
        shutil.copy(path, where / "exercises" / path.name)
    return where


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.perf_counter() - start


def watch_times(kit: Path, chapter: str, puzzle: str, runs: int) -> list[float]:
    """Save-to-verdict times of a `pallas watch` session: the file re-saved each time."""
    process = subprocess.Popen([sys.executable, "-m", "pytest_pallas_hints", "watch", chapter,
                                puzzle], cwd=kit, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in process.stdout], daemon=True).start()

    def verdict(since: float) -> float:
        while True:
            line = lines.get(timeout=300)
            if line.startswith(("✓ ", "✗ ", "! ")):
                return time.perf_counter() - since

    verdict(time.perf_counter())   # the first check: imports and compiles
    times = []
    exercise = kit / "exercises" / f"{chapter}.py"
    for n in range(runs + 1):
        time.sleep(0.3)
        stamp = time.time() + n + 1
        start = time.perf_counter()
        os.utime(exercise, (stamp, stamp))   # a save
        times.append(verdict(start))
    process.stdin.write("q\n")
    process.stdin.flush()
    process.wait(timeout=60)
    return times[1:]   # the first save after start may still compile a second config


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    # A learner's Python keeps compiled bytecode (and pytest its rewritten test modules);
    # a sandbox that switches that off would time recompiling the kit on every run.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory() as tmp:
        kit = kit_copy(Path(tmp))
        (kit / "bare").mkdir()
        (kit / "bare" / "test_bare.py").write_text(BARE_TEST)
        bare_command = [sys.executable, "-m", "pytest", "bare/test_bare.py", "-q",
                        "-p", "no:pallas_hints"]
        rows = []
        for chapter, puzzle in PUZZLES:
            command = [sys.executable, "-m", "pytest", f"exercises/test_{chapter}.py", "-k",
                       puzzle, "-q", "--no-scoreboard"]
            timed(command, kit)   # primes the compile cache
            floor, bare, through_pytest = [], [], []
            for _ in range(args.runs):
                floor.append(timed([sys.executable, "-c", FLOOR], kit))
                bare.append(timed(bare_command, kit))
                through_pytest.append(timed(command, kit))
            watched = watch_times(kit, chapter, puzzle, args.runs)
            rows.append((f"{chapter}.{puzzle}", *map(statistics.median,
                                                     (floor, bare, through_pytest, watched))))
    print(f"{'puzzle':<28}{'floor':>8}{'bare':>8}{'x floor':>9}{'pytest':>9}{'x floor':>9}"
          f"{'watch':>8}")
    for name, floor, bare, through_pytest, watched in rows:
        print(f"{name:<28}{floor:>7.2f}s{bare:>7.2f}s{bare / floor:>8.2f}x"
              f"{through_pytest:>8.2f}s{through_pytest / floor:>8.2f}x{watched:>7.2f}s")
    print("targets: watch <= 0.50 s (basics); pytest <= 1.5x floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
