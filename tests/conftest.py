"""Fixtures for the kit's own tests.

``kit`` copies the kit (exercises, reference, hints, pyproject.toml) into a
fresh pytester folder, so a test can edit a chapter, break the progress file
or delete reference/ without touching the real one, and run pytest there.
"""
import os
import shutil
import zlib
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
MISTAKES = ROOT / "tests" / "mistakes"


TOY_HINTS = '''
[chapter]
title = "Toy"
order = 0

[[puzzle]]
name = "answer"
title = "The answer"
points = 5
edit = ["answer"]
hints = ["Return a number.", "def answer():\\n    return ____"]
[puzzle.say]
values = "not the answer."
'''

TOY_TEST = '''
import pytest
from pytest_pallas_hints import chapter, check

toy = chapter("toy")

@pytest.mark.puzzle("toy.answer")
@pytest.mark.parametrize("n", [1, 2])
def test_answer(n):
    check(toy.answer() * n, 42.0 * n)
'''


def fixed_seed(path: Path) -> str:
    """The inputs' seed a known mistake or alternative runs with: fixed per file, so that
    a CI run replays what ran here. ``KIT_SEEDS=K`` draws the K-th other set, a sweep
    (``KIT_SEEDS=3 pytest tests/test_chapters.py -k mistake -n 2``): a diagnosis must
    hold on any inputs, not only on these."""
    salt = os.environ.get("KIT_SEEDS", "")
    return str(zlib.crc32(f"{path.parent.name}/{path.stem}{salt}".encode()) % 100_000)


class Kit:
    def __init__(self, pytester):
        self.pytester = pytester
        self.path = pytester.path
        for folder in ("exercises", "reference"):
            shutil.copytree(ROOT / folder, self.path / folder,
                            ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(ROOT / "pyproject.toml", self.path)

    def run(self, *args, subprocess=False, cache=False):
        """pytest in the copied kit; ``subprocess`` for xdist and fresh processes;
        ``cache`` keeps pytest's cache folder (and the compile cache in it)."""
        args = (*(() if cache else ("-p", "no:cacheprovider")), *args)
        if subprocess:
            return self.pytester.runpytest_subprocess(*args)
        return self.pytester.runpytest_inprocess(*args)

    def add_toy_chapter(self, solved: bool):
        """A one-puzzle chapter without JAX (toy.answer, 5 points), to test the
        whole-kit scoreboard and grading cheaply."""
        self.write("exercises/hints/toy.toml", TOY_HINTS)
        self.write("exercises/test_toy.py", TOY_TEST)
        self.write("reference/toy.py", "def answer():\n    return 42.0\n")
        body = "    return 42.0\n" if solved else "    raise NotImplementedError\n"
        self.write("exercises/toy.py", f'def answer():\n    """The answer."""\n{body}')

    def only(self, *names: str):
        """Keeps only these chapters in the copy (stable output for snapshots)."""
        for hints in (self.path / "exercises" / "hints").glob("*.toml"):
            if hints.stem not in names:
                for path in (hints, self.path / "exercises" / f"{hints.stem}.py",
                             self.path / "exercises" / f"test_{hints.stem}.py",
                             self.path / "reference" / f"{hints.stem}.py"):
                    path.unlink(missing_ok=True)

    def write(self, relative: str, text: str) -> Path:
        path = self.path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path


@pytest.fixture(scope="session", autouse=True)
def jax_loaded_once():
    """Imports every JAX module the kit's runs touch, before any in-process run.

    pytester restores sys.modules after each in-process run, which would drop
    modules first imported inside it; importing JAX's MLIR dialects a second
    time fails ("Dialect namespace 'builtin' is already registered"), and a second
    copy of Mosaic GPU's modules looks its lowering rules up with the other copy's
    enums (KeyError). The kit defers JAX's Mosaic GPU interpreter until a kernel needs
    it (jaxcompat.defer_gpu_interpreter): it is loaded here, outside every run.
    """
    import importlib
    import jax
    from jax.experimental import pallas as pl

    from pytest_pallas_hints import checking, compile_cache, runtime

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def copy(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    x = jax.numpy.zeros((8, 128))
    runtime.use_interpret_mode(True)
    compile_cache.install(None)  # wraps JAX's compiler once, outside any in-process run
    ran = checking.measure(copy, x, structure=None)
    ran.output.block_until_ready()
    assert ran.traffic.total and ran.work == 0
    checking.lowers_for_tpu(ran)
    from pytest_pallas_hints import jaxcompat
    if jaxcompat.gpu_interpret_missing("kernels") is None:
        importlib.import_module("jax.experimental.pallas.mosaic_gpu")
        getattr(importlib.import_module(jaxcompat.GPU_INTERPRETER), "interpret_pallas_call")


@pytest.fixture
def kit(pytester, monkeypatch):
    monkeypatch.delenv("PALLAS_HINTS_PLATFORMS", raising=False)
    return Kit(pytester)


def pytest_generate_tests(metafunc):
    """``chapter_name``: each chapter of the kit; ``mistake``: each known-wrong solution."""
    if "chapter_name" in metafunc.fixturenames:
        metafunc.parametrize(
            "chapter_name", sorted(p.stem for p in (ROOT / "exercises" / "hints").glob("*.toml")))
    if "mistake" in metafunc.fixturenames:
        metafunc.parametrize("mistake", sorted(MISTAKES.glob("*/*.py")),
                             ids=lambda p: f"{p.parent.name}/{p.stem}")


def unverifiable_puzzles() -> dict[str, str]:
    """Puzzle id -> the feature this JAX lacks to verify it: hopper's Mosaic GPU interpret
    mode and collectives.shift_add's pl.kernel over a TensorCoreMesh (JAX >= 0.11). Their
    tests end as "cannot be verified on JAX X" here, never passed."""
    from pytest_pallas_hints import catalogue, jaxcompat

    kit = catalogue.load(ROOT)
    found = {}
    if jaxcompat.gpu_interpret_missing("kernels"):
        found.update({p.id: jaxcompat.GPU_INTERPRET for p in kit["hopper"].puzzles})
    try:
        jaxcompat.require("pl.kernel over a TensorCoreMesh")
    except jaxcompat.CannotVerify:
        found["collectives.shift_add"] = "pl.kernel over a TensorCoreMesh"
    return found
