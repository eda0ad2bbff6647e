"""Every chapter, run through the plugin: stubs are "not started", references pass,
and every known mistake fails with the words of its diagnosis."""
import ast
import re
from pathlib import Path

import pytest

from pytest_pallas_hints import catalogue
from tests.conftest import fixed_seed, unverifiable_puzzles

ROOT = Path(__file__).resolve().parent.parent

KIT = catalogue.load(ROOT)


def flat(output: str) -> str:
    """Terminal output with line wrapping and indentation folded into single spaces."""
    return re.sub(r"\s+", " ", output)


def unverifiable(chapter: str) -> str | None:
    """Why this JAX's GPU interpret mode cannot run a Mosaic GPU chapter (its test file
    marks its tests mosaic_gpu), or None."""
    if "mark.mosaic_gpu" not in (ROOT / "exercises" / f"test_{chapter}.py").read_text():
        return None
    from pytest_pallas_hints import jaxcompat

    return jaxcompat.gpu_interpret_missing("kernels")


def assert_cannot_be_verified(result, chapter: str) -> None:
    """Every test of the chapter ended as "cannot be verified on JAX X", none passed or
    failed, and the run itself succeeded (the rest of the kit is unaffected)."""
    outcomes = result.parseoutcomes()
    assert result.ret == pytest.ExitCode.OK
    assert "passed" not in outcomes and "failed" not in outcomes and "errors" not in outcomes
    assert "cannot be verified on JAX" in flat(result.stdout.str())


def test_every_stub_is_reported_not_started(kit, chapter_name):
    name = chapter_name
    result = kit.run(f"exercises/test_{name}.py")
    if unverifiable(name):
        return assert_cannot_be_verified(result, name)
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "Traceback" not in out and "NotImplementedError" not in out
    source = (ROOT / "exercises" / f"{name}.py").read_text().splitlines()
    cannot = unverifiable_puzzles()
    for puzzle in KIT[name].puzzles:
        if puzzle.id in cannot:   # this JAX lacks what it needs: never started nor passed
            continue
        match = re.search(rf"^· {re.escape(puzzle.id)} +not started — edit "
                          rf"exercises/{name}\.py(:\d+ \w+\(\).*)$", out, re.M)
        assert match, f"{puzzle.id} is not reported as not started"
        for line, function in re.findall(r":(\d+) (\w+)\(\)", match[1]):
            assert source[int(line) - 1].strip() == "raise NotImplementedError"
            assert function in puzzle.edit or "(from " in match[1]
    assert f"0 of {len(KIT[name].puzzles)}" in out or "0/" in out


def test_every_reference_passes(kit, chapter_name):
    name = chapter_name
    result = kit.run(f"exercises/test_{name}.py", "--reference")
    if unverifiable(name):
        return assert_cannot_be_verified(result, name)
    outcomes = result.parseoutcomes()
    total = len(KIT[name].puzzles)
    verified = total - sum(p.id in unverifiable_puzzles() for p in KIT[name].puzzles)
    assert result.ret == pytest.ExitCode.OK
    assert "failed" not in outcomes and "errors" not in outcomes
    assert outcomes["passed"] >= 2 * verified  # two shape configs per puzzle at least
    assert re.search(rf"^  {name} +[█░]+ +{verified}/{total} ", result.stdout.str(), re.M)


def test_every_known_mistake_fails_with_its_diagnosis(kit, mistake):
    """EXPECT is the words the diagnosis must say (a tuple: any one of them, where the
    inputs decide which of two true findings shows); AVOID, words it must never say."""
    path = mistake
    fields = {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse(path.read_text()).body
              if isinstance(n, ast.Assign) and n.targets[0].id in ("PUZZLE", "EXPECT", "AVOID")}
    puzzle, expect = fields["PUZZLE"], fields["EXPECT"]
    chapter, name = puzzle.split(".")
    result = kit.run(f"exercises/test_{chapter}.py", "--reference", "--pallas-patch",
                     str(path), "-k", name, "--seed", fixed_seed(path))
    if unverifiable(chapter) or puzzle in unverifiable_puzzles():
        return assert_cannot_be_verified(result, chapter)
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, f"{path.name} passed its tests"
    assert f"✗ {puzzle}" in out
    expect = (expect,) if isinstance(expect, str) else expect
    assert any(flat(words) in flat(out) for words in expect), \
        f"the diagnosis does not say {' or '.join(map(repr, expect))}"
    if "AVOID" in fields:   # words of a cause this mistake is not: never stated
        assert flat(fields["AVOID"]) not in flat(out), f"the diagnosis says {fields['AVOID']!r}"
