"""How fast is the learner's feedback loop? Wall times, plugin overhead, bytes moved.

    python benchmarks/bench.py              # print the tables
    python benchmarks/bench.py --write      # also write benchmarks/LATEST.md
    python benchmarks/bench.py --runs 3 --only basics

benchmarks/RESULTS.md is the curated record: copy the tables there, with the
session's `import jax` time, and say what changed.

Wall times are the median of --runs runs of a fresh `python -m pytest`
process (JAX import and compilation included: what a learner waits for).
"cold" runs without pytest's cache folder, so every program is compiled (a
first run, or grading); "warm" runs with a cache folder primed by one earlier
run, so programs compiled before are loaded (compile_cache.py): a learner's
run after an edit. `import jax` is timed too: this VM's speed drifts, and that
number says how fast the machine was during the measurement.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"basics": 5.0, "chapter": 15.0, "kit -n 2": 60.0, "collect-only": 3.0}


def wall(args: list[str], runs: int, cwd: Path = ROOT, ok=(0,), warm: bool = False) -> float:
    """Median wall time of ``pytest args``: cold (no cache folder) or warm (a
    fresh cache folder, primed by one run that is not counted)."""
    with tempfile.TemporaryDirectory() as cache:
        cache_args = ["-o", f"cache_dir={cache}"] if warm else ["-p", "no:cacheprovider"]
        command = [sys.executable, "-m", "pytest", *cache_args, "-q", *args]
        times = []
        for _ in range(runs + warm):
            start = time.perf_counter()
            done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
            times.append(time.perf_counter() - start)
            if done.returncode not in ok:
                raise SystemExit(f"pytest {' '.join(args)} failed:\n{done.stdout[-3000:]}")
        return statistics.median(times[warm:])


def import_jax(runs: int) -> float:
    """Median wall time of `python -c "import jax"`: how fast the machine is now."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import jax"], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def chapters() -> list[str]:
    from pytest_pallas_hints import catalogue

    return list(catalogue.load(ROOT))


def feedback_times(runs: int, only: str | None) -> list[tuple]:
    commands = []
    for name in chapters():
        if not only or name == only:
            target = TARGETS["basics"] if name == "basics" else TARGETS["chapter"]
            commands.append(([f"exercises/test_{name}.py", "--reference"], target))
    if not only:
        commands += [(["exercises", "--reference", "-n", "2"], TARGETS["kit -n 2"]),
                     (["--collect-only"], TARGETS["collect-only"])]
    return [("pytest " + " ".join(args), wall(args, runs), wall(args, runs, warm=True), target)
            for args, target in commands]


TRIVIAL = '''
import jax  # as every chapter's tests do, so both runs pay for the import
import numpy as np
import pytest
from pytest_pallas_hints import check

@pytest.mark.puzzle("basics.add_one")
@pytest.mark.parametrize("n", range({count}))
def test_trivial(n):
    x = np.full((8, 128), n, np.float32)
    check(x + 1, x + 1)
'''


def plugin_overhead(runs: int, count: int = 300) -> list[tuple[str, float, float, float]]:
    """The same trivial puzzle tests with and without the plugin (no kernels run):
    what the plugin's hooks, diagnosis bookkeeping and scoreboard cost per run."""
    with tempfile.TemporaryDirectory() as tmp:
        kit = Path(tmp)
        shutil.copytree(ROOT / "exercises" / "hints", kit / "exercises" / "hints")
        shutil.copy(ROOT / "pyproject.toml", kit)
        (kit / "exercises" / "test_trivial.py").write_text(TRIVIAL.format(count=count))
        rows = []
        for label, args in [(f"{count} trivial puzzle tests", ["exercises/test_trivial.py"]),
                            ("collect-only, whole kit", None)]:
            if args is None:
                with_plugin = wall(["--collect-only"], runs)
                without = wall(["--collect-only", "-p", "no:pallas_hints"], runs)
            else:
                with_plugin = wall(args, runs, cwd=kit)
                without = wall(args + ["-p", "no:pallas_hints"], runs, cwd=kit)
            rows.append((label, with_plugin, without, with_plugin - without))
        return rows


def seeing_overhead(runs: int) -> list[tuple[str, float, float, float]]:
    """A chapter's reference run as it is (a solved performance puzzle computes its cost
    line), with --cost (every kernel's cost) and with --show (every walk drawn): what
    seeing the kernel adds, and that nothing is computed unless asked."""
    args = ["exercises/test_pipelining.py", "--reference", "--no-scoreboard"]
    plain = wall(args, runs, warm=True)
    rows = [("as it is (cost lines of the solved puzzles)", plain, plain, 0.0)]
    for option in ("--cost", "--show"):
        timed = wall(args + [option], runs, warm=True)
        rows.append((option, timed, plain, timed / plain - 1))
    return rows


def bytes_moved() -> list[tuple[str, str, str, str]]:
    """Bytes the reference kernels move at a realistic size, against the minimum."""
    import numpy as np

    from pytest_pallas_hints import chapters as chapter_loader
    from pytest_pallas_hints import runtime
    from pytest_pallas_hints import moved_bytes
    from pytest_pallas_hints.traffic import mib

    runtime.use_interpret_mode(True)
    chapter_loader.configure("reference")
    ref = {}
    for name in chapters():
        ref[name] = chapter_loader._execute(ROOT / "reference" / f"{name}.py",
                                            f"bench.{name}")
    rng = np.random.default_rng(0)
    rows = []

    def row(label, fn, args, kwargs, minimum):
        t = moved_bytes(fn, *args, **kwargs)
        shown = mib(t.read, t.written, minimum)
        rows.append((label, shown[0], shown[1], shown[2]))

    x = rng.standard_normal((1024, 512)).astype(np.float32)
    b = rng.standard_normal((512,)).astype(np.float32)
    row("basics.bias_gelu 1024x512 f32, bm=256", ref["basics"].bias_gelu, (x, b),
        {"bm": 256}, 2 * x.nbytes + b.nbytes)
    if "matmul" in ref:
        a = rng.standard_normal((512, 1024)).astype(np.float32)
        w = rng.standard_normal((1024, 512)).astype(np.float32)
        for blocks in [(128, 128, 128), (256, 512, 256)]:
            bm, bk, bn = blocks
            row(f"matmul.matmul 512x1024x512 f32, blocks {blocks}", ref["matmul"].matmul,
                (a, w), dict(bm=bm, bk=bk, bn=bn), a.nbytes + w.nbytes + 512 * 512 * 4)
    if "flash" in ref:
        q = rng.standard_normal((1, 2, 1024, 128)).astype(np.float32)
        for causal in (False, True):
            row(f"flash.flash_attention B=1 N=2 T=S=1024 H=128, causal={causal}",
                ref["flash"].flash_attention, (q, q, q), dict(causal=causal),
                4 * q.nbytes)
    return rows


def table(header: list[str], rows: list[tuple]) -> str:
    def cell(v):
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", help="one chapter's feedback time, nothing else")
    parser.add_argument("--write", action="store_true", help="write benchmarks/LATEST.md")
    args = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)   # a learner's Python keeps bytecode

    import jax

    head = (f"{datetime.date.today()} · {platform.node() or 'this machine'}: "
            f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
            f"JAX {jax.__version__}, median of {args.runs} runs; `import jax` took "
            f"{import_jax(args.runs):.2f} s")
    sections = [f"# Benchmarks\n\n{head}\n",
                "## Feedback loop (seconds, wall)\n\n" + table(
                    ["command", "cold s", "warm s", "target s"],
                    feedback_times(args.runs, args.only))]
    if not args.only:
        sections.append("## Plugin overhead (seconds, wall)\n\n" + table(
            ["run", "with plugin", "-p no:pallas_hints", "overhead"],
            plugin_overhead(args.runs)))
        sections.append("## Seeing the kernel: pipelining --reference, warm (seconds, wall)\n\n"
                        + table(["run", "seconds", "plain", "added"], seeing_overhead(args.runs)))
        sections.append("## Bytes moved between HBM and VMEM by the reference kernels\n\n"
                        + table(["kernel", "read", "written", "minimum (in + out once)"],
                                bytes_moved()))
    report = "\n\n".join(sections) + "\n"
    print(report)
    if args.write:
        (ROOT / "benchmarks" / "LATEST.md").write_text(report)


if __name__ == "__main__":
    main()
