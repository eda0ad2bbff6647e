"""Right code passes, whatever its form (SPEC 5b): every file of tests/alternatives/
<chapter>/ is a correct solution written differently from reference/ (another block
layout, loop, spelling of an op, JAX's own kernel adapted with glue only), and must get
full marks, as a learner's exercise file would: its functions replace the reference's in
a copy of exercises/<chapter>.py, which the rule for exercise files checks, and the
puzzle's tests run on it. Fields: PUZZLE (the puzzle id, or several separated by
spaces) and, where a foreign kernel cannot pass for a reason the puzzle's docstring
states, EXPECT (the words of the diagnosis it must get instead); UNVERIFIED where the
code is right on the hardware but interpret mode cannot run it as the hardware does
(the words of its "cannot be verified here" verdict: skipped, never failed)."""
import ast
import re
from pathlib import Path

import pytest

from tests.conftest import fixed_seed, unverifiable_puzzles
from tests.test_chapters import assert_cannot_be_verified, flat, unverifiable

ROOT = Path(__file__).resolve().parent.parent
ALTERNATIVES = sorted((ROOT / "tests" / "alternatives").glob("*/*.py"))


def as_exercise_file(chapter: str, alternative: Path) -> str:
    """reference/<chapter>.py with the alternative's functions after it (later definitions
    win), its imports moved up among the reference's (imports come first in the file)."""
    reference = (ROOT / "reference" / f"{chapter}.py").read_text()
    lines = alternative.read_text().splitlines()
    imports = [line for line in lines if re.match(r"(import|from) \S", line)]
    body = [line for line in lines if line not in imports]
    tree = ast.parse(reference)
    last = max(node.end_lineno for node in tree.body if isinstance(node, (ast.Import,
                                                                          ast.ImportFrom)))
    head, tail = reference.splitlines()[:last], reference.splitlines()[last:]
    return "\n".join([*head, *imports, *tail, "", "", *body]) + "\n"


@pytest.mark.parametrize("alternative", ALTERNATIVES,
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_known_alternative_gets_full_marks(kit, alternative):
    fields = {n.targets[0].id: n.value.value for n in ast.parse(alternative.read_text()).body
              if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)}
    puzzles = fields["PUZZLE"].split()
    chapter = puzzles[0].split(".")[0]
    kit.write(f"exercises/{chapter}.py", as_exercise_file(chapter, alternative))
    names = " or ".join(p.split(".")[1] for p in puzzles)
    result = kit.run(f"exercises/test_{chapter}.py", "-k", names,
                     "--seed", fixed_seed(alternative))
    if unverifiable(chapter) or any(p in unverifiable_puzzles() for p in puzzles):
        return assert_cannot_be_verified(result, chapter)
    out = result.stdout.str()
    if "UNVERIFIED" in fields:   # right on the hardware, not run faithfully here
        outcomes = result.parseoutcomes()
        assert result.ret == pytest.ExitCode.OK and "failed" not in outcomes, \
            flat(out)[-3000:]
        assert flat(fields["UNVERIFIED"]) in flat(out)
        assert not any(f"✓ {puzzle}" in out for puzzle in puzzles)   # never passed
        return
    if "EXPECT" in fields:
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        assert flat(fields["EXPECT"]) in flat(out), f"the diagnosis does not say " \
                                                    f"{fields['EXPECT']!r}"
        return
    outcomes = result.parseoutcomes()
    assert result.ret == pytest.ExitCode.OK, flat(out)[-3000:]
    assert "failed" not in outcomes and "errors" not in outcomes
    for puzzle in puzzles:
        assert f"✓ {puzzle}" in out, f"{puzzle} is not solved:\n{out[-3000:]}"
