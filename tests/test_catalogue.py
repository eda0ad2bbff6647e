"""Every puzzle has all its parts (SPEC §2): stub, reference, tests on two or more
shapes, a TPU test, three hints, targeted words and a known mistake."""
import ast
import functools
import json
import shutil
from pathlib import Path

import pytest

from pytest_pallas_hints import catalogue, classroom

ROOT = Path(__file__).resolve().parent.parent
KIT = catalogue.load(ROOT)
PUZZLES = catalogue.puzzles(KIT)


def functions(path: Path) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.parse(path.read_text()).body
            if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}


def signature(node: ast.FunctionDef) -> str:
    return ast.unparse(node.args)


def body_without_docstring(node: ast.FunctionDef) -> str:
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    return "\n".join(ast.unparse(statement) for statement in body)


def is_provided(node: ast.FunctionDef) -> bool:
    return "PROVIDED" in (ast.get_docstring(node) or "")


def test_every_chapter_has_its_three_files_and_hints(chapter_name):
    for path in (f"exercises/{chapter_name}.py", f"exercises/test_{chapter_name}.py",
                 f"reference/{chapter_name}.py", f"exercises/hints/{chapter_name}.toml"):
        assert (ROOT / path).exists(), path


def test_exercises_and_reference_share_one_public_api(chapter_name):
    stubs = functions(ROOT / "exercises" / f"{chapter_name}.py")
    solved = functions(ROOT / "reference" / f"{chapter_name}.py")
    assert stubs.keys() == solved.keys()
    for name, node in stubs.items():
        assert signature(node) == signature(solved[name]), name


def test_every_stub_ends_in_not_implemented_or_is_provided_verbatim(chapter_name):
    solved = functions(ROOT / "reference" / f"{chapter_name}.py")
    for name, node in functions(ROOT / "exercises" / f"{chapter_name}.py").items():
        if is_provided(node):
            assert body_without_docstring(node) == body_without_docstring(solved[name]), name
            continue
        last = node.body[-1]
        assert isinstance(last, ast.Raise) and ast.unparse(last.exc) == "NotImplementedError", \
            f"exercises/{chapter_name}.py: {name}() must end in raise NotImplementedError"
        assert ast.get_docstring(node), f"{name}() has no teaching docstring"


def test_edited_functions_exist_and_are_stubs(chapter_name):
    stubs = functions(ROOT / "exercises" / f"{chapter_name}.py")
    for puzzle in KIT[chapter_name].puzzles:
        for name in puzzle.edit:
            assert name in stubs and not is_provided(stubs[name]), f"{puzzle.id}: {name}"


@pytest.mark.parametrize("puzzle_id", sorted(PUZZLES))
def test_three_hints_render_and_level_three_is_the_reference(puzzle_id):
    puzzle = PUZZLES[puzzle_id]
    nudge, skeleton, solution = (catalogue.hint(ROOT, puzzle, level) for level in (1, 2, 3))
    assert len(nudge) > 40 and "____" in skeleton
    for name in puzzle.edit:
        assert f"def {name}(" in solution
    assert "NotImplementedError" not in solution


@pytest.mark.parametrize("puzzle_id", sorted(PUZZLES))
def test_targeted_words_and_a_known_mistake_that_uses_them(puzzle_id):
    puzzle = PUZZLES[puzzle_id]
    assert puzzle.say, f"{puzzle_id} has no targeted diagnosis ([puzzle.say])"
    expectations = []
    for path in sorted((ROOT / "tests" / "mistakes" / puzzle.chapter).glob("*.py")):
        fields = {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse(path.read_text()).body
                  if isinstance(n, ast.Assign) and n.targets[0].id in ("PUZZLE", "EXPECT")}
        if fields.get("PUZZLE") == puzzle_id:
            expect = fields["EXPECT"]
            expectations += [expect] if isinstance(expect, str) else expect
    assert expectations, f"{puzzle_id} has no known mistake in tests/mistakes/{puzzle.chapter}/"
    words = " ".join(puzzle.say.values())
    assert any(expect in words for expect in expectations), \
        f"no mistake of {puzzle_id} is named by the puzzle's own words"


def test_each_puzzle_has_two_shapes_a_tpu_test_and_its_own_k(pytester, chapter_name):
    path = ROOT / "exercises" / f"test_{chapter_name}.py"
    items, _ = pytester.inline_genitems(str(path), "-p", "no:cacheprovider",
                                        f"--rootdir={ROOT}", "-c", str(ROOT / "pyproject.toml"))
    by_puzzle: dict[str, list] = {}
    for item in items:
        mark = item.get_closest_marker("puzzle")
        assert mark, f"{item.nodeid} has no puzzle marker"
        by_puzzle.setdefault(mark.args[0], []).append(item)
    assert set(by_puzzle) == {p.id for p in KIT[chapter_name].puzzles}
    for puzzle in KIT[chapter_name].puzzles:
        tests = by_puzzle[puzzle.id]
        # a hardware test: compiled on a TPU, or on a Hopper GPU for Mosaic GPU chapters
        on_cpu = [t for t in tests
                  if not (t.get_closest_marker("tpu") or t.get_closest_marker("gpu"))]
        assert len(on_cpu) >= 2, f"{puzzle.id}: fewer than two shape configurations"
        assert len(on_cpu) < len(tests), f"{puzzle.id}: no tpu- or gpu-marked test"
        listed = pytester.runpytest_inprocess(
            str(path), "--collect-only", "-q", "-k", puzzle.name, "-p", "no:cacheprovider",
            f"--rootdir={ROOT}", "-c", str(ROOT / "pyproject.toml")).stdout.lines
        selected = {line for line in listed if "::" in line}
        assert selected == {t.nodeid for t in tests}, \
            f"-k {puzzle.name} does not select exactly the tests of {puzzle.id}"


# ------------------------------------------------- stubs teach, not transcribe ---

class _Anonymous(ast.NodeTransformer):
    """Every identifier replaced by one placeholder: a statement with its names changed
    reads the same."""

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(id="_", ctx=node.ctx), node)

    def visit_Attribute(self, node):
        self.generic_visit(node)
        node.attr = "_"
        return node

    def visit_arg(self, node):
        node.arg = "_"
        return node

    def visit_keyword(self, node):
        self.generic_visit(node)
        node.arg = node.arg and "_"
        return node


def anonymous(node) -> str:
    import copy

    return ast.unparse(_Anonymous().visit(copy.deepcopy(node)))


def reference_statements(chapter: str) -> dict[str, str]:
    """Anonymised statement -> its source, for every statement of 20 characters or more
    (after anonymising) in a reference function the learner writes."""
    path = ROOT / "reference" / f"{chapter}.py"
    source = path.read_text()
    found = {}
    for function in ast.parse(source).body:
        if not isinstance(function, ast.FunctionDef) or is_provided(function):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.stmt) and not isinstance(node, ast.FunctionDef) \
                    and node is not function and not (isinstance(node, ast.Expr)
                                                      and isinstance(node.value, ast.Constant)):
                text = anonymous(node)
                if len(text) >= 20:
                    found.setdefault(text, ast.get_source_segment(source, node) or text)
    return found


def stub_snippets(chapter: str):
    """(line number, anonymised code) for every piece of code in the stub file outside
    PROVIDED functions: its statements, and each line or `span` of its docstrings and
    comments that parses as Python."""
    path = ROOT / "exercises" / f"{chapter}.py"
    source = path.read_text()
    tree = ast.parse(source)
    provided = [(f.lineno, f.end_lineno) for f in tree.body
                if isinstance(f, ast.FunctionDef) and is_provided(f)]

    def outside_provided(line):
        return not any(start <= line <= end for start, end in provided)

    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and outside_provided(node.lineno):
            yield node.lineno, anonymous(node)
    for number, line in enumerate(source.splitlines(), start=1):
        if not outside_provided(number):
            continue
        text = line.strip().lstrip("#").strip()
        for piece in [text, *__import__("re").findall(r"`([^`]+)`", text)]:
            for candidate in (piece, piece.rstrip(".,;:")):
                try:
                    parsed = ast.parse(candidate)
                except SyntaxError:
                    continue
                for statement in parsed.body:
                    yield number, anonymous(statement)
                break


def test_no_stub_spells_out_a_statement_of_the_reference(chapter_name):
    """The code-level answer belongs to hints 1 and 2 (and 3, the reference): a stub
    that contains a reference statement, even with its names changed, is a transcription
    exercise, not a puzzle."""
    answers = reference_statements(chapter_name)
    leaks = sorted({f"exercises/{chapter_name}.py:{line}: {answers[code]}"
                    for line, code in stub_snippets(chapter_name) if code in answers})
    assert not leaks, "stubs give away reference statements:\n" + "\n".join(leaks)


def text_snippets(text: str):
    """Anonymised code for each line or `span` of ``text`` that parses as Python."""
    import re

    for line in text.splitlines():
        stripped = line.strip().lstrip("#").strip()
        for piece in [stripped, *re.findall(r"`([^`]+)`", stripped)]:
            for candidate in (piece, piece.rstrip(".,;:")):
                try:
                    parsed = ast.parse(candidate)
                except SyntaxError:
                    continue
                for statement in parsed.body:
                    yield anonymous(statement)
                break


def reference_expressions(chapter: str, functions: tuple) -> set[str]:
    """Every expression of 24 characters or more (spaces left out) in the reference
    functions ``functions``: the pieces of the answer a hint could quote."""
    tree = ast.parse((ROOT / "reference" / f"{chapter}.py").read_text())
    found = set()
    for function in tree.body:
        if isinstance(function, ast.FunctionDef) and function.name in functions:
            for node in ast.walk(function):
                if isinstance(node, ast.expr) and not isinstance(node, ast.Constant):
                    text = "".join(ast.unparse(node).split())
                    if len(text) >= 24:
                        found.add(text)
    return found


def code_spans(line: str):
    """Each call or subscript chain in ``line`` (``x_hbm.at[pl.ds(i, 1)]``, ``f(a)(b)``),
    brackets balanced, wherever it starts."""
    import re

    for start in re.finditer(r"(?<![\w.])[A-Za-z_][\w.]*", line):
        end, depth, i = start.end(), 0, start.end()
        while i < len(line):
            if line[i] in "([":
                depth += 1
            elif line[i] in ")]":
                depth -= 1
                if depth < 0:
                    break
                if depth == 0:
                    end = i + 1
                    nxt = re.match(r"\.[A-Za-z_]\w*", line[i + 1:])
                    if nxt:
                        i += nxt.end()
                    if i + 1 >= len(line) or line[i + 1] not in "([":
                        break
            elif depth == 0 and not (line[i].isalnum() or line[i] in "_."):
                break
            i += 1
        if end > start.end():
            yield line[start.start():end]


def hint_expressions(text: str):
    """Every expression inside each line, `span` or call chain of ``text`` that parses."""
    import re

    for line in text.splitlines():
        stripped = line.strip().lstrip("#").strip()
        for piece in [stripped, *re.findall(r"`([^`]+)`", stripped), *code_spans(stripped)]:
            try:
                parsed = ast.parse(piece.rstrip(".,;:"))
            except SyntaxError:
                continue
            for node in ast.walk(parsed):
                if isinstance(node, ast.expr):
                    yield "".join(ast.unparse(node).split())


@pytest.mark.parametrize("puzzle_id", sorted(PUZZLES))
def test_no_first_hint_spells_out_a_statement_of_the_reference(puzzle_id):
    """Hint 1 is the idea, in words: a statement of the solution (even with its names
    changed), or a sizeable expression of it, belongs to hint 2's skeleton at the
    earliest."""
    puzzle = PUZZLES[puzzle_id]
    answers = reference_statements(puzzle.chapter)
    leaks = {answers[code] for code in text_snippets(puzzle.hints[0]) if code in answers}
    pieces = reference_expressions(puzzle.chapter, puzzle.edit)
    leaks |= {code for code in hint_expressions(puzzle.hints[0]) if code in pieces}
    assert not leaks, f"hint 1 of {puzzle_id} gives away: " + " | ".join(sorted(leaks))


def provided_statements(chapter: str) -> list[tuple[str, int, str]]:
    """(function, line, anonymised statement) of every PROVIDED function of a stub file."""
    path = ROOT / "exercises" / f"{chapter}.py"
    found = []
    for function in ast.parse(path.read_text()).body:
        if isinstance(function, ast.FunctionDef) and is_provided(function):
            for node in ast.walk(function):
                if isinstance(node, ast.stmt) and node is not function and not (
                        isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
                    found.append((function.name, node.lineno, anonymous(node)))
    return found


def test_no_provided_helper_hands_out_a_puzzles_answer(chapter_name):
    """A classroom copy ships the PROVIDED helpers: none may hold a statement of any
    chapter's answer (a reference function some puzzle has the learner write)."""
    answers = {}
    for chapter in KIT:
        edited = tuple(name for p in KIT[chapter].puzzles for name in p.edit)
        source = (ROOT / "reference" / f"{chapter}.py").read_text()
        for function in ast.parse(source).body:
            if isinstance(function, ast.FunctionDef) and function.name in edited:
                for node in ast.walk(function):
                    if isinstance(node, ast.stmt) and node is not function:
                        code = anonymous(node)
                        if len(code) >= 20 and not isinstance(node, ast.FunctionDef):
                            answers.setdefault(code, (chapter, function.name))
    leaks = sorted({f"exercises/{chapter_name}.py:{line} {name}() holds a statement of "
                    f"{answers[code][1]}() (reference/{answers[code][0]}.py)"
                    for name, line, code in provided_statements(chapter_name) if code in answers})
    assert not leaks, "PROVIDED helpers give away answers:\n" + "\n".join(leaks)



# ------------------------------------------ hints give the idea, never the answer ---

@functools.cache
def hint_leaks(root: Path) -> tuple:
    """Every hint of the kit at ``root`` that spells out a solution of reference/, by
    the measure a classroom copy is checked with (classroom.hint_leaks)."""
    return tuple(classroom.hint_leaks(ROOT / "reference", root))


def leaks_of(puzzle_id: str, root: Path = ROOT) -> list[str]:
    return [str(leak) for leak in hint_leaks(root) if leak.puzzle == puzzle_id]


@pytest.mark.parametrize("puzzle_id", sorted(PUZZLES))
def test_no_hint_spells_out_a_solution(puzzle_id):
    """A classroom copy ships hints 1 and 2 and no reference/: hint 1 holds no
    statement of any solution, hint 2 at most half of any one solution's substantial
    statements (20 characters or more, whitespace and comments left out; the rest of
    the rule is classroom.hint_leaks's docstring). A skeleton leaves the lines the
    lesson is about blank, and says why in its comments."""
    assert_hints_teach(puzzle_id, ROOT)


def assert_hints_teach(puzzle_id: str, root: Path):
    leaks = leaks_of(puzzle_id, root)
    assert not leaks, "hints that hand out the answer:\n" + "\n".join(leaks)


def paste(toml: str, puzzle: str, level: int, code: str) -> str:
    """The hints file ``toml`` with ``code`` added at the end of hint ``level`` of
    ``puzzle`` (every hint is a triple-quoted string)."""
    at = toml.index("hints = [", toml.index(f'\nname = "{puzzle}"\n'))
    for _ in range(level):
        start = toml.index('"""', at)
        at = toml.index('"""', start + 3) + 3
    end = at - 3
    return toml[:end] + "\n" + json.dumps(code, ensure_ascii=False)[1:-1] + toml[end:]


def with_solution_pasted(tmp_path: Path, pastes: list) -> Path:
    """A copy of the kit's hints in which each (puzzle, level, host) of ``pastes``
    has the reference source of ``puzzle`` added to hint ``level`` of ``host``."""
    copy = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
    shutil.copytree(ROOT / "exercises" / "hints", copy / "exercises" / "hints")
    for puzzle, level, host in pastes:
        path = copy / "exercises" / "hints" / f"{host.chapter}.toml"
        path.write_text(paste(path.read_text(), host.name, level,
                              catalogue.solution_source(ROOT, puzzle)))
    catalogue.load(copy)  # still valid hints files
    return copy


def test_a_solution_pasted_into_a_hints_file_is_refused(tmp_path):
    """The test above fails on a hints file with one solution pasted into a hint, and
    on it only; pasted into hint 1 or 2, of its own puzzle or of any other, every
    puzzle's solution is found; a statement spread over lines with a comment between,
    or quoted in a comment, still counts."""
    halo = PUZZLES["quant.halo"]
    copy = with_solution_pasted(tmp_path, [(halo, 2, halo)])
    with pytest.raises(AssertionError, match="hint 2 of quant.halo holds 6 of the 6 "
                                             r"statements of quant.conv_kernel\(\)"):
        assert_hints_teach("quant.halo", copy)
    assert {(leak.puzzle, leak.level, leak.solution) for leak in hint_leaks(copy)} == {
        ("quant.halo", 2, "quant.conv_kernel"), ("quant.halo", 2, "quant.conv2d_rows")}

    puzzles = sorted(PUZZLES.values(), key=lambda p: p.id)
    hosts = puzzles[1:] + puzzles[:1]    # each solution in the next puzzle's hint
    for level in (1, 2):
        copy = with_solution_pasted(tmp_path, [(puzzle, level, host)
                                               for puzzle, host in zip(puzzles, hosts)])
        for puzzle, host in zip(puzzles, hosts):
            found = {leak.solution for leak in hint_leaks(copy)
                     if leak.puzzle == host.id and leak.level == level}
            assert found & {f"{puzzle.chapter}.{name}" for name in puzzle.edit}, \
                f"{puzzle.id}'s solution pasted into hint {level} of {host.id} went unseen"
            with pytest.raises(AssertionError):
                assert_hints_teach(host.id, copy)

    statements = classroom.solution_statements(
        "def kernel(x_ref, o_ref):\n"
        "    o_ref[...] = jnp.maximum(x_ref[...],   # a comment\n"
        "                             0.0).astype(o_ref.dtype)\n"
        "    total = x_ref[...].sum(axis=0, keepdims=True)\n")["kernel"]
    assert statements == ["o_ref[...]=jnp.maximum(x_ref[...],0.0).astype(o_ref.dtype)",
                          "total=x_ref[...].sum(axis=0,keepdims=True)"]
    assert classroom.statements_held(statements, (
        "o_ref[...] = jnp.maximum(x_ref[...],  # why\n    0.0).astype(o_ref.dtype)\n"
        "# total = x_ref[...].sum(axis=0, keepdims=True)")) == statements


def test_a_chapter_asks_for_simulated_chips_in_its_hints_file(tmp_path):
    hints = tmp_path / "exercises" / "hints"
    hints.mkdir(parents=True)
    entry = ('[[puzzle]]\nname = "a"\ntitle = "A"\npoints = 1\nedit = ["a"]\n'
             'hints = ["one", "two"]\n')
    (hints / "one.toml").write_text("[chapter]\norder = 1\n" + entry)
    (hints / "many.toml").write_text("[chapter]\norder = 2\ndevices = 8\n" + entry)
    kit = catalogue.load(tmp_path)
    assert (kit["one"].devices, kit["many"].devices) == (1, 8)
    (hints / "many.toml").write_text("[chapter]\ndevices = 0\n" + entry)
    with pytest.raises(catalogue.CatalogueError, match="devices must be a whole number"):
        catalogue.load(tmp_path)


def test_the_parsed_catalogue_is_kept_between_runs_and_checked_on_every_load(tmp_path):
    """Kept chapters equal freshly read ones; an edited hints file is read again; a
    damaged kept file is ignored; what is kept is checked as if just parsed."""
    store = tmp_path / "store"
    store.mkdir()
    assert catalogue.load(ROOT, store) == KIT == catalogue.load(ROOT, store)

    hints = tmp_path / "exercises" / "hints"
    hints.mkdir(parents=True)
    entry = ('[[puzzle]]\nname = "a"\ntitle = "A"\npoints = 1\nedit = ["a"]\n'
             'hints = ["one", "two"]\n')
    (hints / "one.toml").write_text("[chapter]\norder = 1\n" + entry)
    assert catalogue.load(tmp_path, store)["one"].puzzles[0].points == 1
    (hints / "one.toml").write_text("[chapter]\norder = 1\n" + entry.replace("= 1\ne", "= 7\ne"))
    assert catalogue.load(tmp_path, store)["one"].puzzles[0].points == 7
    (kept,) = store.glob("*.json")
    text = kept.read_text()
    kept.write_text("{not json")
    assert catalogue.load(tmp_path, store)["one"].puzzles[0].points == 7
    kept.write_text(text.replace('"points": 7', '"points": "seven"'))
    with pytest.raises(catalogue.CatalogueError, match="points"):
        catalogue.load(tmp_path, store)
