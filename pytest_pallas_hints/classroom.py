"""Make a classroom copy of the kit: everything a student needs, no solutions.

    python -m pytest_pallas_hints.classroom OUTDIR [--from KIT]

The copy has the exercises, their tests and hints, the plugin, the README and
the GitHub Classroom workflow; it has no ``reference/`` (so no level-3 hints),
none of the kit's own tests and no known mistakes. Before it finishes, it
checks that no reference function body appears anywhere in the copy.

It also writes, into the copy's workflow, the git blob id of every graded file
(tests, hints, plugin, configuration): the grading script restores them by that
content, whatever the student's history holds (grade.py).
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import sys
from pathlib import Path

from .grade import blob_id

SHIPPED = ["README.md", "pyproject.toml", "conftest.py", ".gitignore", "LICENSE",
           "exercises", "pytest_pallas_hints", ".github/workflows/classroom.yml",
           "gradescope"]
WORKFLOW = ".github/workflows/classroom.yml"
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pallas_progress.json*")


def make_copy(kit: Path, out: Path) -> list[Path]:
    """Copies the student's part of ``kit`` into ``out``; returns the files written."""
    if not (kit / "exercises" / "hints").is_dir():
        raise SystemExit(f"{kit} is not a Pallas exercises kit (no exercises/hints/)")
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} exists and is not empty: choose a new folder")
    out.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED:
        source = kit / name
        if source.is_dir():
            shutil.copytree(source, out / name, ignore=IGNORED)
        elif source.exists():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, out / name)
    leaks = solution_leaks(kit / "reference", out)
    if leaks:
        shutil.rmtree(out)
        raise SystemExit("refusing to make the copy: solution code found in\n  "
                         + "\n  ".join(leaks))
    workflow = out / WORKFLOW
    if workflow.exists():
        listed = json.dumps(graded_files(out), sort_keys=True, separators=(",", ":"))
        text = workflow.read_text(encoding="utf-8")
        workflow.write_text(text.replace("PALLAS_GRADED: '{}'", f"PALLAS_GRADED: '{listed}'"),
                            encoding="utf-8")
    return sorted(p for p in out.rglob("*") if p.is_file())


def graded_files(copy: Path) -> dict[str, str]:
    """Path -> git blob id of every file that decides a grade: all but the students'
    exercises/<chapter>.py, the workflow itself (protected in Classroom) and the docs."""
    chapters = {p.stem for p in (copy / "exercises" / "hints").glob("*.toml")}
    graded = {}
    for path in sorted(copy.rglob("*")):
        relative = path.relative_to(copy).as_posix()
        student = relative.startswith("exercises/") and path.suffix == ".py" \
            and path.parent.name == "exercises" and path.stem in chapters
        if path.is_file() and not student and relative not in (WORKFLOW, "README.md") \
                and not relative.startswith(("gradescope/", ".")):
            graded[relative] = blob_id(path.read_bytes())
    return graded


SHORTEST_LEAK = 40   # characters of a body, whitespace and comments removed


def solution_leaks(reference: Path, copy: Path) -> list[str]:
    """Places in ``copy`` that contain the body of a reference solution."""
    bodies = []
    for path in sorted(reference.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and "PROVIDED" not in (
                    ast.get_docstring(node) or ""):
                bodies.append((f"{path.stem}.{node.name}", _flat(_body(node, source))))
    # A body as short as `o_ref[...] = x_ref[...]` is the obvious line, not a solution
    # to hide: it stands in other chapters' stubs and in the kit's own code too.
    bodies = [(name, body) for name, body in bodies if len(body) >= SHORTEST_LEAK]
    leaks = []
    for file in sorted(p for p in copy.rglob("*") if p.is_file()):
        try:
            text = _flat(file.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            continue
        for name, body in bodies:
            if body and body in text:
                leaks.append(f"{file.relative_to(copy)}: {name}()")
    return leaks


def _body(node: ast.FunctionDef, source: str) -> str:
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    return "\n".join(ast.get_source_segment(source, statement) or "" for statement in body)


def _flat(text: str) -> str:
    """Code with comments and all whitespace removed, to compare bodies by content."""
    return re.sub(r"\s+", "", re.sub(r"#[^\n]*", "", text))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_pallas_hints.classroom",
        description="Make a classroom copy of the kit: no reference solutions.")
    parser.add_argument("outdir", type=Path, help="the new folder (must not exist or be empty)")
    parser.add_argument("--from", dest="kit", type=Path, default=Path.cwd(),
                        help="the kit to copy (default: the current folder)")
    args = parser.parse_args(argv)
    files = make_copy(args.kit.resolve(), args.outdir.resolve())
    print(f"classroom copy written to {args.outdir} ({len(files)} files, no reference/).")
    print("Next: make it a GitHub template repository and create the assignment:")
    print(f"  cd {args.outdir} && git init -b main && git add -A && "
          "git commit -m 'Pallas exercises'")
    print("  then push it to GitHub, tick 'Template repository' in its settings, and pick it")
    print("  as the starter code of a new GitHub Classroom assignment (README: For teachers).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
