"""The puzzle catalogue: every chapter's puzzles, points and hints.

One TOML file per chapter, ``exercises/hints/<chapter>.toml``::

    [chapter]
    title = "Basics: grids, BlockSpecs and index maps"
    order = 1
    devices = 8                       # simulated chips the chapter needs (default 1)

    [[puzzle]]
    name = "add_one"                  # id: basics.add_one
    title = "Whole-array kernel"
    points = 10
    edit = ["add_one_kernel", "add_one"]   # the functions the learner writes
    hints = ["the idea", "the pattern with blanks"]   # level 3 is the solution

    cost = true                       # a performance lesson: show its TPU cost when solved

    [puzzle.say]                      # this puzzle's words for a finding
    zeros = "nothing was stored: ..."

Level 3 is read from ``reference/<chapter>.py`` at display time, never copied
into the hints file, so a classroom copy without ``reference/`` has none.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import tomllib
from pathlib import Path

HINT_LEVELS = 3


class CatalogueError(Exception):
    """A hints file that cannot be used; the message names file and field."""


@dataclasses.dataclass(frozen=True)
class Puzzle:
    chapter: str
    name: str
    title: str
    points: int
    edit: tuple[str, ...]
    hints: tuple[str, ...]
    say: dict[str, str]
    cost: bool = False        # a performance lesson: a solved puzzle shows what it would cost

    @property
    def id(self) -> str:
        return f"{self.chapter}.{self.name}"


@dataclasses.dataclass(frozen=True)
class Chapter:
    name: str
    title: str
    order: int
    puzzles: tuple[Puzzle, ...]
    devices: int = 1          # the simulated CPU devices its tests need (a mesh of chips)

    @property
    def points(self) -> int:
        return sum(p.points for p in self.puzzles)


def hints_dir(root: Path) -> Path:
    return root / "exercises" / "hints"


def is_kit(root: Path) -> bool:
    return hints_dir(root).is_dir()


def load(root: Path, store: Path | None = None) -> dict[str, Chapter]:
    """All chapters of the kit at ``root``, in curriculum order. With ``store`` (a
    folder, e.g. under pytest's cache), the parsed TOML is kept there as JSON, keyed
    on the bytes of every hints file: parsing is ~40 ms of every run, and the files
    change only when a maintainer edits them. What is kept is data, checked again on
    every load exactly as if just parsed."""
    paths = sorted(hints_dir(root).glob("*.toml"))
    texts = {path.name: path.read_bytes() for path in paths}
    kept = parsed = None
    if store is not None:
        key = hashlib.sha256(b"".join(name.encode() + b"\0" + text + b"\0"
                                      for name, text in texts.items()))
        kept = store / f"{key.hexdigest()[:32]}.json"
        try:
            parsed = json.loads(kept.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            parsed = None
    if not isinstance(parsed, dict) or set(parsed) != set(texts):
        parsed = {path.name: _parse(path, texts[path.name]) for path in paths}
        if kept is not None:
            try:
                for old in store.glob("*.json"):
                    old.unlink()
                kept.write_text(json.dumps(parsed), encoding="utf-8")
            except (OSError, TypeError, ValueError):
                pass
    chapters = [_read_chapter(path, parsed[path.name]) for path in paths]
    return {c.name: c for c in sorted(chapters, key=lambda c: (c.order, c.name))}


def puzzles(chapters: dict[str, Chapter]) -> dict[str, Puzzle]:
    return {p.id: p for c in chapters.values() for p in c.puzzles}


def hint(root: Path, puzzle: Puzzle, level: int) -> str:
    """The text of hint ``level`` (1: the idea, 2: a skeleton, 3: the solution)."""
    if level < HINT_LEVELS:
        return puzzle.hints[level - 1].strip("\n")
    source = solution_source(root, puzzle)
    if source is None:
        return ("The solution is not shipped with this copy of the kit "
                "(no reference/ folder). Ask your teacher, or go back to hint 2.")
    return source


def solution_source(root: Path, puzzle: Puzzle) -> str | None:
    """The reference source of the functions the learner writes for ``puzzle``."""
    path = root / "reference" / f"{puzzle.chapter}.py"
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8")
    found = {node.name: node for node in ast.parse(text).body
             if isinstance(node, ast.FunctionDef)}
    parts = []
    for name in puzzle.edit:
        if name not in found:
            raise CatalogueError(f"{path}: puzzle {puzzle.id} edits {name}(), "
                                 "which reference/ does not define")
        node = found[name]
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        parts.append("\n".join(text.splitlines()[start - 1:node.end_lineno]))
    return "\n\n\n".join(parts)


def _parse(path: Path, text: bytes) -> dict:
    try:
        return tomllib.loads(text.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise CatalogueError(f"{path}: not valid TOML: {error}") from None


def _read_chapter(path: Path, data: dict) -> Chapter:
    name = path.stem
    head = data.get("chapter", {})
    entries = data.get("puzzle", [])
    if not entries:
        raise CatalogueError(f"{path}: no [[puzzle]] entries")
    devices = head.get("devices", 1)
    if not isinstance(devices, int) or devices < 1:
        raise CatalogueError(f"{path}: [chapter] devices must be a whole number >= 1")
    return Chapter(name=name, title=head.get("title", name), order=int(head.get("order", 99)),
                   puzzles=tuple(_read_puzzle(path, name, e) for e in entries),
                   devices=devices)


def _read_puzzle(path: Path, chapter: str, entry: dict) -> Puzzle:
    where = f"{path}: puzzle {entry.get('name', '?')!r}"
    for field, kind in [("name", str), ("title", str), ("points", int),
                        ("edit", list), ("hints", list)]:
        if not isinstance(entry.get(field), kind):
            raise CatalogueError(f"{where}: field {field!r} must be a {kind.__name__}")
    if len(entry["hints"]) != HINT_LEVELS - 1:
        raise CatalogueError(f"{where}: give {HINT_LEVELS - 1} hints "
                             "(the idea, a skeleton); the solution comes from reference/")
    return Puzzle(chapter=chapter, name=entry["name"], title=entry["title"],
                  points=entry["points"], edit=tuple(entry["edit"]),
                  hints=tuple(entry["hints"]), say=dict(entry.get("say", {})),
                  cost=bool(entry.get("cost", False)))
