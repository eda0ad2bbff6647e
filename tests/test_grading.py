"""Grading: the GitHub Classroom result and Gradescope's results.json, decoded and
checked field by field; broken chapters, hangs and skips; the classroom copy."""
import base64
import json
import re
from pathlib import Path

import pytest

from pytest_pallas_hints import catalogue, classroom
from tests.conftest import unverifiable_puzzles

ROOT = Path(__file__).resolve().parent.parent
KIT = catalogue.load(ROOT)
TOTAL = sum(c.points for c in KIT.values())


def classroom_result(kit, *args):
    kit.run(*args, "--classroom-result=result.b64")
    return json.loads(base64.b64decode((kit.path / "result.b64").read_text()))


def gradescope_results(kit, *args):
    kit.run(*args, "--gradescope-results=results.json")
    return json.loads((kit.path / "results.json").read_text())


def by_id(tests):
    return {t["name"].split(" · ")[0]: t for t in tests}


TEST_FIELDS = {"name": str, "status": str, "score": int, "message": str, "test_code": str,
               "filename": str, "line_no": int, "duration": float}


def test_reference_run_gets_full_marks_with_the_kit_total_as_max(kit):
    """Every puzzle this JAX can verify passes with full marks; one it cannot (older
    JAX) is never passed: 0 points, the feature named, the run's status "fail"."""
    result = classroom_result(kit, "exercises", "--reference", "-n", "2")
    assert set(result) == {"version", "status", "max_score", "tests"}
    cannot = unverifiable_puzzles()
    assert result["version"] == 1 and result["status"] == ("fail" if cannot else "pass")
    assert result["max_score"] == TOTAL
    puzzles = catalogue.puzzles(KIT)
    assert set(by_id(result["tests"])) == set(puzzles)
    for test in result["tests"]:
        assert {k: type(v) for k, v in test.items()} == TEST_FIELDS
        puzzle = puzzles[test["name"].split(" · ")[0]]
        assert test["name"] == f"{puzzle.id} · {puzzle.title}"
        if puzzle.id in cannot:
            assert (test["status"], test["score"]) == ("fail", 0)
            assert test["message"].startswith("cannot be verified on JAX ")
            assert cannot[puzzle.id] in test["message"]
            continue
        assert (test["status"], test["score"], test["message"]) == ("pass", puzzle.points, "")
        assert test["test_code"] == f"pytest exercises/test_{puzzle.chapter}.py " \
                                    f"-k {puzzle.name} --hint"
        assert test["filename"] == f"exercises/test_{puzzle.chapter}.py"
        source = (kit.path / test["filename"]).read_text().splitlines()
        assert source[test["line_no"] - 1].startswith(("def test_", "@"))  # the test's first line
        assert test["duration"] > 0


def test_untouched_stubs_score_zero_and_say_not_started(kit):
    result = classroom_result(kit, "exercises", "-n", "2")
    assert result["status"] == "fail" and result["max_score"] == TOTAL
    cannot = unverifiable_puzzles()
    for test in result["tests"]:
        assert (test["status"], test["score"]) == ("fail", 0)
        if test["name"].split(" · ")[0] in cannot:
            assert test["message"].startswith("cannot be verified on JAX ")
            continue
        assert re.search(r"not started — edit exercises/\w+\.py:\d+", test["message"])


def test_gradescope_results_field_by_field(kit):
    kit.add_toy_chapter(solved=True)
    results = gradescope_results(kit, "exercises/test_toy.py", "exercises/test_basics.py",
                                 "-k", "answer or tiled")
    assert set(results) == {"score", "execution_time", "output", "tests"}
    assert results["score"] == sum(t["score"] for t in results["tests"]) == 5
    assert results["execution_time"] > 0
    assert results["output"].startswith("Pallas exercises · 1 of")
    tests = by_id(results["tests"])
    assert tests["toy.answer"] == {"name": "toy.answer · The answer", "number": "1.1",
                                   "score": 5, "max_score": 5, "status": "passed",
                                   "output": "solved", "visibility": "visible"}
    tiled = tests["basics.tiled"]
    assert (tiled["number"], tiled["score"], tiled["max_score"], tiled["status"]) == \
        ("2.2", 0, 10, "failed")
    assert "basics.tiled" in tiled["output"] and "not started" in tiled["output"]
    assert sum(t["max_score"] for t in results["tests"]) == 5 + KIT["basics"].points


def test_a_chapter_that_fails_to_import_scores_zero_and_the_others_still_score(kit):
    kit.add_toy_chapter(solved=True)
    kit.write("exercises/basics.py", "def add_one(x:\n")
    result = classroom_result(kit, "exercises/test_toy.py", "exercises/test_basics.py")
    tests = by_id(result["tests"])
    assert tests["toy.answer"]["score"] == 5
    basics = [t for name, t in tests.items() if name.startswith("basics.")]
    assert len(basics) == 9 and all(t["score"] == 0 for t in basics)
    assert all("does not import: SyntaxError" in t["message"] for t in basics)


def test_a_typo_scores_zero_for_the_puzzle_that_reads_it_and_nothing_else(kit):
    solved = (ROOT / "reference" / "basics.py").read_text()
    kit.write("exercises/basics.py", solved.replace("jnp.sum(x_ref[...], axis=1",
                                                    "jnp.sum(x_reff[...], axis=1"))
    result = classroom_result(kit, "exercises/test_basics.py", "-k", "add_one or row_sum")
    tests = by_id(result["tests"])
    assert tests["basics.add_one"]["score"] == 10
    assert tests["basics.row_sum"]["score"] == 0
    message = tests["basics.row_sum"]["message"]
    assert "`x_reff` is defined nowhere in this file" in message and "`x_ref`?" in message
    assert "breaks the rule" not in message


def test_a_test_file_that_cannot_be_collected_is_an_error_for_its_puzzles(kit):
    kit.add_toy_chapter(solved=True)
    kit.write("exercises/test_basics.py", "import no_such_module\n")
    result = classroom_result(kit, "exercises/test_toy.py", "exercises/test_basics.py",
                              "--continue-on-collection-errors")
    tests = by_id(result["tests"])
    assert tests["toy.answer"]["score"] == 5
    assert tests["basics.tiled"]["status"] == "error"
    assert "no_such_module" in tests["basics.tiled"]["message"]
    assert result["max_score"] == 5 + KIT["basics"].points


def test_a_hang_fails_its_puzzle_within_the_bound_and_loses_nothing_else(kit):
    kit.add_toy_chapter(solved=True)
    kit.write("exercises/toy.py", '''
def answer():
    """Loops forever."""
    n = 0
    while True:
        n += 1
''')
    kit.write("exercises/test_toy2.py", '''
import pytest

@pytest.mark.puzzle("basics.add_one")
def test_add_one_placeholder():
    pass
''')
    result = classroom_result(kit, "exercises/test_toy.py", "exercises/test_toy2.py",
                              "--pallas-timeout=1")
    tests = by_id(result["tests"])
    assert tests["toy.answer"]["score"] == 0
    assert "no result after 1 s" in tests["toy.answer"]["message"]
    assert tests["basics.add_one"]["status"] == "pass"


def test_skipped_and_xfailed_tests_never_score(kit):
    kit.add_toy_chapter(solved=True)
    kit.write("exercises/test_toy.py", '''
import pytest

@pytest.mark.puzzle("toy.answer")
@pytest.mark.tpu
def test_answer_on_tpu():
    pass

@pytest.mark.puzzle("basics.add_one")
@pytest.mark.xfail(reason="known")
def test_add_one_xfail():
    assert False

@pytest.mark.puzzle("basics.tiled")
@pytest.mark.skip(reason="not today")
def test_tiled_skipped():
    pass
''')
    tests = by_id(classroom_result(kit, "exercises/test_toy.py")["tests"])
    assert tests["toy.answer"]["score"] == 0
    assert tests["basics.add_one"]["score"] == 0
    assert tests["basics.tiled"]["score"] == 0


# -------------------------------------------------------- classroom copy ---

def test_the_classroom_copy_has_no_solution_and_still_runs(tmp_path, pytester):
    out = tmp_path / "copy"
    classroom.main([str(out), "--from", str(ROOT)])
    assert not (out / "reference").exists() and not (out / "tests").exists()
    assert (out / ".github" / "workflows" / "classroom.yml").exists()
    assert classroom.solution_leaks(ROOT / "reference", out) == []
    # an independent scan: no file holds any multi-line reference function body
    import ast

    for path in (ROOT / "reference").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and len(node.body) > 2 \
                    and "PROVIDED" not in (ast.get_docstring(node) or ""):
                body = "\n".join(ast.unparse(s) for s in node.body[1:])
                for file in out.rglob("*.py"):
                    for other in ast.walk(ast.parse(file.read_text())):
                        if isinstance(other, ast.FunctionDef):
                            assert "\n".join(ast.unparse(s) for s in other.body[1:]) != body, \
                                f"{file}: {node.name}"
    pytester.chdir()
    import os

    os.chdir(out)
    result = pytester.runpytest_inprocess("exercises/test_basics.py", "-k", "add_one",
                                          "--hint=3", "-p", "no:cacheprovider")
    assert "not shipped with this copy" in result.stdout.str()
    assert "hint 2 of 2" in result.stdout.str()  # a copy without reference/ has two
    assert "o_ref[...] = x_ref[...] + 1" not in result.stdout.str()


def test_the_classroom_copy_refuses_to_ship_a_solution(tmp_path):
    kit = tmp_path / "kit"
    for name in ("exercises", "reference", "pytest_pallas_hints"):
        (kit / name).mkdir(parents=True)
    (kit / "exercises" / "hints").mkdir()
    (kit / "reference" / "toy.py").write_text(
        "def copy_kernel(x_ref, o_ref):\n    o_ref[...] = x_ref[...]\n\n\n"
        "def answer(values):\n    total = sum(v * v for v in values)\n"
        "    return total / len(values)\n")
    (kit / "exercises" / "toy.py").write_text(   # the one-line copy is no secret
        "def copy_kernel(x_ref, o_ref):\n    o_ref[...] = x_ref[...]\n\n\n"
        "def answer(values):\n    raise NotImplementedError\n")
    assert classroom.make_copy(kit, tmp_path / "fine")
    (kit / "exercises" / "toy.py").write_text(
        "def answer(values):\n    total = sum(v * v for v in values)\n"
        "    return total / len(values)   # oops, solved\n")
    with pytest.raises(SystemExit, match="solution code found"):
        classroom.make_copy(kit, tmp_path / "out")
    assert not (tmp_path / "out").exists()


TOY_REFERENCE = """def scale_kernel(x_ref, o_ref, *, factor):
    scaled = x_ref[...] * (factor * 2)
    shifted = scaled + jnp.float32(1)
    o_ref[...] = shifted.astype(o_ref.dtype)
"""


def toy_hints(idea: str, skeleton: str) -> str:
    return ('[chapter]\ntitle = "Toy"\n\n[[puzzle]]\nname = "scale"\ntitle = "Scale"\n'
            'points = 5\nedit = ["scale_kernel"]\n'
            f'hints = [{json.dumps(idea)}, {json.dumps(skeleton)}]\n')


def test_the_classroom_copy_refuses_hints_that_spell_out_a_solution(tmp_path):
    """python -m pytest_pallas_hints.classroom refuses a copy whose hint 1 holds a
    statement of a solution, or whose hint 2 holds more than half of one's, though no
    solution body appears whole (classroom.hint_leaks)."""
    kit = tmp_path / "kit"
    for name in ("exercises/hints", "reference", "pytest_pallas_hints"):
        (kit / name).mkdir(parents=True)
    (kit / "reference" / "toy.py").write_text(TOY_REFERENCE)
    hints = kit / "exercises" / "hints" / "toy.toml"
    idea = "Scale x by twice the factor, add one, store in o_ref's dtype."
    fine = ("def scale_kernel(x_ref, o_ref, *, factor):\n"
            "    scaled = x_ref[...] * ____      # twice the factor\n"
            "    shifted = scaled + jnp.float32(1)\n"
            "    o_ref[...] = ____               # in o_ref's dtype")
    hints.write_text(toy_hints(idea, fine))
    assert classroom.main([str(tmp_path / "fine"), "--from", str(kit)]) == 0

    # two of three statements, out of order, one in a comment: no body whole, but
    # more than half of the solution
    leaky = ("def scale_kernel(x_ref, o_ref, *, factor):\n"
             "    shifted = scaled + jnp.float32(1)\n"
             "    scaled = ____\n"
             "    ____   # o_ref[...] = shifted.astype(o_ref.dtype)")
    hints.write_text(toy_hints(idea, leaky))
    assert classroom.solution_leaks(kit / "reference", kit / "exercises") == []
    with pytest.raises(SystemExit, match=r"(?s)solution code found.*hint 2 of toy.scale holds "
                                         r"2 of the 3 statements of toy.scale_kernel\(\)"):
        classroom.main([str(tmp_path / "out"), "--from", str(kit)])
    assert not (tmp_path / "out").exists()

    hints.write_text(toy_hints("Store shifted.astype(o_ref.dtype) into o_ref[...]: "
                               "o_ref[...] = shifted.astype(o_ref.dtype).", fine))
    with pytest.raises(SystemExit, match="hint 1 of toy.scale holds 1 of the 3 statements"):
        classroom.main([str(tmp_path / "out"), "--from", str(kit)])
    assert not (tmp_path / "out").exists()


