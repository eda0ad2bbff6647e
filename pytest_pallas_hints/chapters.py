"""Which code a test file runs: the learner's ``exercises/``, the solved twins in
``reference/`` (``--reference``), or either with a known mistake patched in.

A test file says ``basics = chapter("basics")`` and calls ``basics.add_one``;
it never imports a chapter itself, so one test file serves every source. A
chapter file that does not import (a syntax error mid-edit) becomes a stand-in
whose functions raise that error: its tests fail one by one with the reason,
and every other chapter still runs and scores.
"""
from __future__ import annotations

import ast
import sys
import traceback
import types
from pathlib import Path

# Resolved once per session by the plugin (pytest_configure).
source = "exercises"             # or "reference"
patches: list[Path] = []         # files whose definitions replace the chapter's
_loaded: set[Path] = set()       # chapter files executed this session (and patches)


class ChapterImportError(Exception):
    """The learner's chapter file raised while it was imported."""

    def __init__(self, path: Path, error: BaseException):
        self.path, self.error = path, error
        line = getattr(error, "lineno", None) or _last_line_in(path, error)
        where = f"{path.parent.name}/{path.name}" + (f":{line}" if line else "")
        self.line = line
        super().__init__(f"{where} does not import: "
                         f"{type(error).__name__}: {getattr(error, 'msg', None) or error}")


class MissingFunction(AttributeError):
    """A test called a function the learner's chapter file no longer defines (renamed
    or deleted): the learner's to fix, said with the names it holds that are close."""
    pallas_learner = True

    def __init__(self, path: Path, name: str, defined):
        import difflib

        self.path, self.function = path, name
        self.close = difflib.get_close_matches(name, [d for d in defined
                                                      if not d.startswith("_")], n=1)
        super().__init__(f"{path.parent.name}/{path.name} defines no `{name}`")

    def findings(self):
        from .diagnose import Finding

        where = f"{self.path.parent.name}/{self.path.name}"
        close = f" Did you rename it to `{self.close[0]}`?" if self.close else ""
        return [Finding("missing_function", (
            f"{where} has no `{self.function}`: the tests call the functions of the stub by "
            f"their names, so a renamed or deleted one cannot be judged.{close} Keep the "
            "name and the parameters the stub gave it (git diff shows what changed); "
            "helpers of your own may have any other name."),
            [("missing", f"{self.function} (called by the tests, defined nowhere in {where})")])]


class ChapterRuleBroken(ChapterImportError):
    """The learner's chapter file breaks the rule for exercise files (rules.py): it is
    not run at all."""

    def __init__(self, path: Path, broken):
        Exception.__init__(self, f"{path.parent.name}/{path.name}:{broken.line} breaks the "
                                 f"rule for exercise files: {broken.rule}")
        self.path, self.error, self.line, self.broken = path, None, broken.line, broken


def configure(new_source: str, new_patches=()) -> None:
    global source, patches
    source, patches = new_source, [Path(p).resolve() for p in new_patches]


def chapter(name: str) -> types.ModuleType:
    """The module for chapter ``name``, loaded from the source this run uses.

    Called from ``exercises/test_<name>.py``; the kit's root is the parent of
    the calling file's folder.
    """
    caller = Path(sys._getframe(1).f_globals["__file__"]).resolve()
    root = caller.parent.parent
    path = root / source / f"{name}.py"
    module_name = f"{source}.{name}"
    if source == "exercises" and path.exists():  # what a learner (and a grade) runs
        from . import rules

        broken = rules.check(path)
        if broken is not None:
            return _BrokenChapter(module_name, ChapterRuleBroken(path, broken))
    try:
        module = _execute(path, module_name)
        for patch in patches:
            if patch.parent.name == name:
                _execute(patch, module_name, into=module)
    except Exception as error:  # any import failure, SyntaxError included
        return _BrokenChapter(module_name, ChapterImportError(path, error))
    module.__getattr__ = _missing(path, module)
    return module


def _missing(path: Path, module: types.ModuleType):
    """A chapter module's ``__getattr__`` (called only for names it lacks): a
    public name the tests ask for is a function the learner renamed or deleted."""
    def missing(name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise MissingFunction(path, name, list(vars(module)))
    return missing


def stubs(path: Path) -> dict[str, int]:
    """Functions of a chapter file still ending in ``raise NotImplementedError``,
    with the line of that raise."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return {}
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and isinstance(node.body[-1], ast.Raise) \
                and "NotImplementedError" in ast.unparse(node.body[-1]):
            found[node.name] = node.body[-1].lineno
    return found


def sources() -> set[Path] | None:
    """The files a learner's kernels may come from: the chapter files (and patches)
    loaded in this session; None before any was (the kit's own unit tests)."""
    return set(_loaded) or None


def _execute(path: Path, module_name: str, into: types.ModuleType | None = None):
    _loaded.add(path.resolve())
    module = into or types.ModuleType(module_name)
    if into is None:
        module.__file__ = str(path)
        sys.modules[module_name] = module  # inspect and pickle look here
    code = compile(path.read_text(encoding="utf-8"), str(path), "exec")
    exec(code, module.__dict__)
    return module


class _BrokenChapter(types.ModuleType):
    """Every function of a chapter that failed to import raises that failure."""

    def __init__(self, name: str, error: ChapterImportError):
        super().__init__(name)
        self.import_error = error

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        error = self.import_error

        def broken(*args, **kwargs):
            raise error

        broken.__name__ = attribute
        return broken


def _last_line_in(path: Path, error: BaseException) -> int | None:
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if Path(frame.filename) == path:
            return frame.lineno
    return None


BrokenChapter = _BrokenChapter   # what a test file holds when its chapter file is broken
