"""The learner's terminal, pinned: a change to the layout of the diagnosis, the
hints or the scoreboard shows up here as a diff. After a deliberate change:

    PALLAS_UPDATE_SNAPSHOTS=1 pytest tests/test_snapshots.py
"""
import os
import re
from pathlib import Path

import pytest

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
MISTAKES = Path(__file__).resolve().parent / "mistakes"


def ours(out: str) -> str:
    """The plugin's part of the output: from its section to the scoreboard's last line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if "Pallas puzzles" in line or line.startswith("Pallas exercises"))
    end = max(i for i, line in enumerate(lines) if line.startswith(("next:", "every puzzle")))
    text = re.sub(r"\d{4}-\d\d-\d\d", "DATE", "\n".join(lines[start:end + 1])) + "\n"
    return re.sub(r"(\.py|, ):\d+", r"\1:N", text)  # line numbers move with every docstring edit


def matches_snapshot(name: str, text: str):
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("PALLAS_UPDATE_SNAPSHOTS") or not path.exists():
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"the layout changed: compare with {path}"


@pytest.fixture
def basics_only(kit):
    kit.only("basics")
    return kit


def test_untouched_stubs(basics_only):
    out = basics_only.run("exercises/test_basics.py").stdout.str()
    matches_snapshot("stubs", ours(out))


def patch(kit, name: str) -> str:
    """A known mistake copied into the kit, so that the paths it prints are stable."""
    text = (MISTAKES / "basics" / f"{name}.py").read_text()
    return str(kit.write(f"tests/mistakes/basics/{name}.py", text))


def test_a_wrong_answer_with_a_block_map(basics_only):
    out = basics_only.run("exercises/test_basics.py", "--reference", "-k", "outer_add",
                          "--seed", "1", "--pallas-patch",
                          patch(basics_only, "outer_add_y_follows_rows")).stdout.str()
    matches_snapshot("wrong_blocks", ours(out))


def test_an_error_with_hints_one_and_two(basics_only):
    out = basics_only.run("exercises/test_basics.py", "--reference", "-k", "row_sum", "--hint=2",
                          "--seed", "1", "--pallas-patch",
                          patch(basics_only, "row_sum_python_if")).stdout.str()
    matches_snapshot("error_with_hints", ours(out))


def test_a_solved_chapter(basics_only):
    out = basics_only.run("exercises/test_basics.py", "--reference").stdout.str()
    matches_snapshot("solved", ours(out))
