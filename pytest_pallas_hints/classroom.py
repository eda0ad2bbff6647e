"""Make a classroom copy of the kit: everything a student needs, no solutions.

    python -m pytest_pallas_hints.classroom OUTDIR [--from KIT]

The copy has the exercises, their tests and hints, the plugin, the README and
the GitHub Classroom workflow; it has no ``reference/`` (so no level-3 hints),
none of the kit's own tests and no known mistakes. Before it finishes, it
checks that no reference function body appears anywhere in the copy, and that
the hints it ships (levels 1 and 2) do not spell out the solutions
(``hint_leaks``: the rule and how it is measured are in its docstring).

It also writes, into the copy's workflow, the git blob id of every graded file
(tests, hints, plugin, configuration): the grading script restores them by that
content, whatever the student's history holds (grade.py).
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import json
import re
import shutil
import sys
import tokenize
from pathlib import Path

from . import catalogue
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
    leaks += [str(leak) for leak in hint_leaks(kit / "reference", out)]
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



# ------------------------------------------------ hints that spell out the answer ---

SHORTEST_STATEMENT = 20   # characters of a statement, whitespace and comments removed


@dataclasses.dataclass(frozen=True)
class HintLeak:
    """A hint that holds too much of one solution: ``held`` of its ``total``
    substantial statements."""
    puzzle: str                 # whose hint it is, e.g. "quant.halo"
    level: int                  # 1 (the idea) or 2 (the skeleton)
    solution: str               # the solved function, e.g. "quant.conv_kernel"
    held: tuple[str, ...]       # its statements found in the hint, as compared
    total: int                  # its substantial statements

    def __str__(self) -> str:
        allowed = "none" if self.level == 1 else f"at most {self.total // 2}"
        held = [s if len(s) <= 60 else s[:57] + "..." for s in self.held]
        return (f"exercises/hints/{self.puzzle.split('.')[0]}.toml: hint {self.level} of "
                f"{self.puzzle} holds {len(self.held)} of the {self.total} statements of "
                f"{self.solution}() ({allowed} allowed): " + " | ".join(held))


def solution_statements(source: str) -> dict[str, list[str]]:
    """Function name -> its substantial statements, for every function defined at the
    top level of ``source`` (a reference file), each statement as compared: its
    source text with comments and all whitespace removed.

    Statements at every depth count (kernel bodies nested in the function and the
    phases under ``pl.when`` too): a simple statement whole (``acc_ref[...] += ...``,
    ``return pl.pallas_call(...)(x)``); an ``if``, ``elif``, ``while``, ``for`` or
    ``with`` by its header up to the colon (``if`` + condition + ``:``); a nested
    function by each of its decorators without the ``@`` (``pl.when(k == 0)``, so that
    prose naming the condition counts too), not by its ``def`` line; docstrings not at
    all. Substantial: ``SHORTEST_STATEMENT`` (20) characters or more as compared;
    shorter lines (``k = pl.program_id(2)``) are what any skeleton shows."""
    lines = source.encode("utf-8").splitlines(keepends=True)

    def code(node) -> str:      # ast's offsets count bytes of UTF-8
        first, last = node.lineno - 1, node.end_lineno - 1
        if first == last:
            text = lines[first][node.col_offset:node.end_col_offset]
        else:
            text = b"".join([lines[first][node.col_offset:], *lines[first + 1:last],
                             lines[last][:node.end_col_offset]])
        return _flat_code(text.decode("utf-8"))

    def statements(function: ast.FunctionDef) -> list[str]:
        found = []      # (line, column, statement as compared)
        for node in ast.walk(function):
            if node is function or not isinstance(node, ast.stmt):
                continue
            where = (node.lineno, node.col_offset)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [(d.lineno, d.col_offset, code(d)) for d in node.decorator_list]
            elif isinstance(node, ast.If):
                found.append((*where, "if" + code(node.test) + ":"))
            elif isinstance(node, ast.While):
                found.append((*where, "while" + code(node.test) + ":"))
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                found.append((*where, "for" + code(node.target) + "in" + code(node.iter)
                              + ":"))
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                found.append((*where, "with" + ",".join(
                    code(item.context_expr) + ("as" + code(item.optional_vars)
                                               if item.optional_vars else "")
                    for item in node.items) + ":"))
            elif isinstance(node, (ast.Try, ast.ClassDef, ast.Match)):
                continue          # their parts are statements of their own
            elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                      and isinstance(node.value.value, str)):
                found.append((*where, code(node)))
        return [statement for _, _, statement in sorted(found)
                if len(statement) >= SHORTEST_STATEMENT]

    return {node.name: statements(node) for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef)}


def statements_held(statements: list[str], hint: str) -> list[str]:
    """The statements (as ``solution_statements`` gives them) that ``hint`` holds: a
    statement is held when it occurs, as a substring, in the hint's text with all
    whitespace removed, read twice: once with the hint's comments removed (a
    statement broken over lines with a comment in between) and once with only the
    ``#`` marks removed (a statement quoted in a comment or in prose). A statement
    inside a longer line counts (``o_ref[...] = acc_ref[...]`` is held by
    ``o_ref[...] = acc_ref[...].astype(o_ref.dtype)``); one that a solution has twice
    counts twice."""
    return _held(statements, _readings(hint))


def _readings(hint: str) -> tuple[str, str]:
    """The two texts ``statements_held`` looks statements up in."""
    return (re.sub(r"\s+", "", re.sub(r"#[^\n]*", "", hint)),
            re.sub(r"\s+", "", hint.replace("#", "")))


def _held(statements: list[str], readings: tuple[str, ...]) -> list[str]:
    return [s for s in statements if any(s in text for text in readings)]


def hint_leaks(reference: Path, copy: Path) -> list[HintLeak]:
    """Hints in ``copy`` (its exercises/hints/) that spell out a solution in
    ``reference``: a classroom copy ships hints 1 and 2 and no solutions.

    The solutions: every function that some puzzle's ``edit`` names, read from
    ``reference/<chapter>.py``; their substantial statements as
    ``solution_statements`` gives them (20 characters or more, comments and
    whitespace removed). The hints: the text of hint 1 and hint 2 of every puzzle,
    as the catalogue reads it (TOML escapes resolved; ``[puzzle.say]`` words are
    diagnoses, not hints, and are not read). Every hint is compared with every
    solution of the kit, its own puzzle's and the others' (``pytest --hint=2``
    prints the hints of every failing puzzle at once), a statement being held as
    ``statements_held`` says. The rule: a hint 1 (the idea, in words) holds no
    statement of any solution; a hint 2 (a skeleton with blanks) holds at most half
    of any one solution's statements, rounded down (2 of 5): the rest, the lines the
    lesson is about, are left blank. Each finding is one hint and one solution."""
    kit = catalogue.load(copy)
    solutions = []
    for chapter in kit.values():
        path = reference / f"{chapter.name}.py"
        if not path.exists():
            continue
        functions = solution_statements(path.read_text(encoding="utf-8"))
        for name in dict.fromkeys(name for puzzle in chapter.puzzles for name in puzzle.edit):
            if functions.get(name):
                solutions.append((f"{chapter.name}.{name}", functions[name]))
    leaks = []
    for puzzle in catalogue.puzzles(kit).values():
        for level, hint in enumerate(puzzle.hints, start=1):
            readings = _readings(hint)
            for solution, statements in solutions:
                held = _held(statements, readings)
                allowed = 0 if level == 1 else len(statements) // 2
                if len(held) > allowed:
                    leaks.append(HintLeak(puzzle.id, level, solution, tuple(held),
                                          len(statements)))
    return leaks


def _flat_code(code: str) -> str:
    """Python source with its comments (found by the tokenizer, so a ``#`` inside a
    string stays) and all whitespace removed."""
    try:
        tokens = [token.string for token in tokenize.generate_tokens(io.StringIO(code).readline)
                  if token.type != tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):
        return _flat(code)
    return re.sub(r"\s+", "", "".join(tokens))


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
