"""The rule an exercise file follows, checked from its syntax tree before it runs.

In a graded run the learner's code runs in the same process as the tests that
judge it, so this rule is the barrier between the two. It is an allowlist, and
its words are one data file, ``vocabulary.toml``:

* imports only of the modules that have a section there, at the top of the file
  (never ``jax.experimental.pallas.ops``: JAX's own kernels);
* a module appears only as the base of a direct attribute chain (``jnp.dot``),
  never as a value (stored, passed, returned, compared, a default);
* every attribute is in the vocabulary: on a module, a name of that module's
  section (or a submodule with a section of its own); on any other value, one of
  the ``[values]`` names. No name or attribute that starts with ``__``, no
  attribute that starts with ``_``;
* no assignment or deletion of an attribute, and subscript stores only into a
  name the file binds itself (a ref or an array it holds: ``o_ref[...] = x``);
* ``global`` only of names the file defines at its top level;
* the builtins of ``[builtins]`` only, the decorators of ``[decorators]`` only;
  no ``class``, ``async`` or ``match`` statements; no ``interpret=`` or ``out=``
  keywords (the kit chooses how kernels run; NumPy's ``out=`` writes in place).

A name the file reads but binds nowhere, and that is no builtin of this Python,
breaks nothing: it is a typo (``y_reff``). Running the code that reads it raises
``NameError`` there, so only the puzzles whose code reads it fail; ``typos`` lists
each with its line and the file's names it is closest to, for the diagnosis.

What it guarantees: no expression in the file evaluates to a module other than
the listed ones or to anything reached from one by a name off the list, and the
file writes to nothing it did not make. So it cannot reach ``sys``, the tests,
the plugin or a frame, and cannot change a library the checks use.

No ``class``, not even a frozen dataclass of plain fields (JAX's kernels keep their
block sizes in one): its field names are attribute names the file makes up, read on
whatever value the file holds, so admitting them would need a list of every attribute
any reachable object has (``f_back``, ``gi_frame``, ``tb_frame``...) beside this one, and
the guarantee above rests on needing no such list. Block sizes travel as keyword
arguments, a dict or ``functools.partial``; JAX's kernels adapted to an exercise file
take theirs so (``tests/alternatives``).

The same check runs locally, so a learner's run never differs from a graded one.
It is not a sandbox: what the listed functions can do, the file can do.
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import difflib
import fnmatch
import functools
import importlib
import symtable
import tomllib
import types
from pathlib import Path

VOCABULARY = Path(__file__).with_name("vocabulary.toml")
SCOPES = (ast.FunctionDef, ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp,
          ast.DictComp)
# Named with their own words, though the vocabulary leaves them out anyway.
INTROSPECTION = {"f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace",
                 "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await",
                 "ag_frame", "ag_code", "tb_frame", "tb_next", "co_code", "co_consts",
                 "func_globals", "func_code", "cell_contents"}
REACHING = {"getattr", "setattr", "delattr", "hasattr", "vars", "type", "globals", "locals",
            "exec", "eval", "compile", "open", "__import__", "breakpoint", "dir", "input",
            "help", "memoryview", "object", "super", "classmethod", "staticmethod",
            "property", "id", "format", "issubclass"}
KEYWORDS = {"interpret": "the kit decides how kernels run (interpret mode on a laptop, "
                         "compiled on a TPU): a kernel passes no interpret=",
            "out": "out= writes into an existing array in place: return a new array instead"}


@dataclasses.dataclass(frozen=True)
class Broken:
    """The first place a file breaks the rule."""
    line: int
    rule: str
    code: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.rule}   {self.code.strip()}"


@dataclasses.dataclass(frozen=True)
class Typo:
    """A name a scope of the file reads, bound nowhere in the file and no builtin."""
    name: str
    line: int
    column: int                 # where the name starts on its line (0-based)
    code: str                   # the line
    matches: tuple[str, ...]    # the names that scope sees that are closest to it


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    modules: dict[str, frozenset[str]]      # module -> the names it may give
    refused: dict[str, tuple[str, ...]]     # module -> reviewed-out names (globs)
    never: tuple[str, ...]
    values: frozenset[str]
    builtins: frozenset[str]
    decorators: frozenset[str]


@functools.lru_cache(maxsize=None)
def vocabulary(path: Path = VOCABULARY) -> Vocabulary:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return Vocabulary(
        modules={name: frozenset(entry.get("names", ()))
                 for name, entry in data["modules"].items()},
        refused={name: tuple(entry.get("refused", ())) for name, entry in data["modules"].items()},
        never=tuple(data["never"]["modules"]),
        values=frozenset(data["values"]["names"]),
        builtins=frozenset(data["builtins"]["names"]),
        decorators=frozenset(data["decorators"]["names"]))


def check(path: Path) -> Broken | None:
    """The first line of ``path`` that breaks the rule, or None."""
    return check_source(path.read_text(encoding="utf-8"))


def check_source(source: str) -> Broken | None:
    try:
        tree = ast.parse(source)
        table = symtable.symtable(source, "<exercise>", "exec")
    except SyntaxError:
        return None  # the import reports it, with its own line
    lines = source.splitlines()
    refusals = _Reader(vocabulary(), tree, table).read()
    if not refusals:
        return None
    first = min(refusals, key=lambda r: (getattr(r.node, "lineno", 1),   # the innermost
                                         getattr(r.node, "end_col_offset", 0)))
    line = getattr(first.node, "lineno", 1)
    return Broken(line, first.rule, lines[line - 1] if line <= len(lines) else "")


def typos(source: str) -> list[Typo]:
    """Every name of ``source`` that a scope reads and nothing binds, and that is no
    builtin: the first read in each scope, with the scope's closest names."""
    try:
        tree = ast.parse(source)
        table = symtable.symtable(source, "<exercise>", "exec")
    except SyntaxError:
        return []
    lines = source.splitlines()
    found = []
    for node, name, matches in _Scopes(tree, table, vocabulary().builtins).typos:
        line = getattr(node, "lineno", 1)
        found.append(Typo(name, line, getattr(node, "col_offset", 0),
                          lines[line - 1] if line <= len(lines) else "", matches))
    return sorted(found, key=lambda typo: (typo.line, typo.column))


class _Refused(Exception):
    def __init__(self, node, rule: str):
        super().__init__(rule)
        self.node, self.rule = node, rule


class _Imports:
    """What the file imports (module aliases, imported names), and what each listed
    module may give it."""

    def __init__(self, words: Vocabulary):
        self.words = words
        self.modules: dict[str, str] = {}   # local name -> the module it names
        self.names: dict[str, str] = {}     # local name -> "module.name" it was imported as

    def read(self, tree: ast.Module) -> list[_Refused]:
        refusals = []
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                try:
                    self._import(node)
                except _Refused as refused:
                    refusals.append(refused)
        return refusals

    def _import(self, node) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                self._allowed(node, alias.name, f"import {alias.name}")
                if alias.asname:
                    self._bind(node, alias.asname, alias.name)
                else:
                    self._bind(node, alias.name.split(".")[0], alias.name.split(".")[0])
            return
        if node.level or not node.module:
            raise _Refused(node, "relative imports are not allowed in an exercise file")
        for alias in node.names:
            if alias.name == "*":
                raise _Refused(node, "`from ... import *` is not allowed: import names one "
                                     "by one")
            _dunder(node, alias.name)
            local = alias.asname or alias.name
            submodule = f"{node.module}.{alias.name}"
            if submodule in self.words.modules or self.never(submodule):
                self._allowed(node, submodule, f"import {submodule}")
                self._bind(node, local, submodule)
                continue
            self._allowed(node, node.module, f"from {node.module} import")
            self.offered(node, node.module, alias.name)
            self.names[local] = f"{node.module}.{alias.name}"

    def never(self, name: str) -> bool:
        return any(name == never or name.startswith(never + ".") for never in self.words.never)

    def _allowed(self, node, name: str, said: str) -> None:
        if self.never(name):
            raise _Refused(node, f"`{name}` is JAX's own library of kernels: the puzzles are "
                                 "to write them yourself")
        if name not in self.words.modules:
            allowed = ", ".join(self.words.modules)
            raise _Refused(node, f"`{said}` is not allowed in an exercise file; allowed: "
                                 f"{allowed}")

    def _bind(self, node, local: str, module: str) -> None:
        if self.modules.get(local, module) != module or local in self.names:
            raise _Refused(node, f"`{local}` names two things: give each import its own name")
        self.modules[local] = module

    def is_package(self, name: str) -> bool:
        """A listed module, or a package on the way to one (jax.experimental)."""
        return any(m == name or m.startswith(name + ".") for m in self.words.modules)

    def offered(self, node, module: str, name: str, shown: str = "") -> None:
        """``module.name`` must be in the module's vocabulary (``shown``: as written)."""
        real = f"{module}.{name}"
        shown = f"`{shown}` ({real})" if shown and shown != real else f"`{real}`"
        if name.startswith("_"):
            raise _Refused(node, f"{shown}: names starting with _ are private to the library")
        if name in INTROSPECTION:
            raise _Refused(node, f"`.{name}`: frame and code introspection is not allowed in "
                                 "an exercise file")
        if name not in self.words.modules.get(module, ()):
            reason = ("it is kept out of the kit's vocabulary (pytest_pallas_hints/"
                      "vocabulary.toml)" if _refused_in(self.words, module, name) else
                      "it is not in the kit's vocabulary (pytest_pallas_hints/vocabulary.toml)")
            if _is_module(module, name):
                reason = "it is a module that an exercise file may not use"
            raise _Refused(node, f"{shown} is not allowed in an exercise file: {reason}")

    def dotted(self, node) -> str | None:
        """The module path an attribute chain names: pl.when -> jax.experimental.pallas.when."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        head = self.modules.get(node.id) or self.names.get(node.id)
        return ".".join([head, *reversed(parts)]) if head else None


class _Scopes:
    """The file's names, scope by scope (symtable): which it binds, the builtins it
    reads, and the names it reads that nothing binds (typos)."""

    def __init__(self, tree: ast.Module, table: symtable.SymbolTable, builtins: frozenset):
        self.tree, self.table, self.builtins = tree, table, builtins
        self.top_level = {s.get_name() for s in table.get_symbols() if _binds(s)}
        self.bound, stack = set(), [table]
        while stack:
            scope = stack.pop()
            self.bound |= {s.get_name() for s in scope.get_symbols()
                           if _binds(s) or s.is_parameter()}
            stack.extend(scope.get_children())
        self.typos: list[tuple[ast.AST, str, tuple[str, ...]]] = []   # (node, name, matches)
        self.refusals = self._read(table, frozenset(self.top_level | builtins))

    def is_typo(self, name: str) -> bool:
        """Bound by no scope of the file and no builtin of Python: reading it raises
        NameError."""
        return name not in self.bound and name not in self.top_level \
            and not hasattr(builtins, name)

    def read(self) -> list[_Refused]:
        """Every name a scope reads that no scope of the file binds is a builtin: it
        must be one of the listed ones (a name that is no builtin is a typo)."""
        return self.refusals

    def _read(self, table: symtable.SymbolTable, seen: frozenset) -> list[_Refused]:
        """``seen``: the names the enclosing scopes give this one."""
        if table.get_type() != "module":
            seen = seen | {s.get_name() for s in table.get_symbols()
                           if _binds(s) or s.is_parameter()}
        refusals = []
        for symbol in table.get_symbols():
            name = symbol.get_name()
            if not symbol.is_referenced():
                continue
            is_global = symbol.is_global() if table.get_type() != "module" else not _binds(symbol)
            if is_global and name not in self.top_level and name not in self.builtins:
                node = self._use_in(table, name)
                if name in REACHING or name.startswith("__"):
                    refusals.append(_Refused(node, f"`{name}` is not allowed in an exercise "
                                                   "file (it reaches around the language)"))
                elif hasattr(builtins, name):
                    refusals.append(_Refused(node, f"`{name}` is not a builtin an exercise file "
                                                   "may use (the kit's vocabulary lists them: "
                                                   "pytest_pallas_hints/vocabulary.toml)"))
                else:   # bound nowhere: reading it raises NameError, where it is read
                    matches = difflib.get_close_matches(name, sorted(seen), n=3)
                    self.typos.append((node, name, tuple(matches)))
        for child in table.get_children():
            refusals += self._read(child, seen)
        return refusals

    def _use_in(self, table: symtable.SymbolTable, name: str):
        """The first read of ``name`` in the scope ``table`` describes (for its line)."""
        if table.get_type() == "module":
            owners = [self.tree]
        else:
            owners = [n for n in ast.walk(self.tree) if isinstance(n, SCOPES)
                      and n.lineno == table.get_lineno()]
        for owner in owners:
            stack = list(ast.iter_child_nodes(owner))
            while stack:
                node = stack.pop(0)
                if isinstance(node, ast.Name) and node.id == name:
                    return node
                if not isinstance(node, SCOPES):
                    stack.extend(ast.iter_child_nodes(node))
        return next((n for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id == name),
                    self.tree)


class _Reader:
    """Reads one file's tree against the vocabulary: every refusal, each node read once."""

    def __init__(self, words: Vocabulary, tree: ast.Module, table: symtable.SymbolTable):
        self.words, self.tree = words, tree
        self.imports = _Imports(words)
        self.scopes = _Scopes(tree, table, words.builtins)
        self.parent: dict[int, ast.AST] = {}
        self.nodes = [tree]   # every node, in ast.walk's order, each one's children once
        for node in self.nodes:
            for child in ast.iter_child_nodes(node):
                self.parent[id(child)] = node
                self.nodes.append(child)

    def read(self) -> list[_Refused]:
        refusals = self.imports.read(self.tree)
        if refusals:
            return refusals  # the names below mean nothing without their imports
        for node in self.nodes:
            try:
                self._node(node)
            except _Refused as refused:
                refusals.append(refused)
        return refusals + self.scopes.read()

    def _node(self, node) -> None:
        modules = self.imports.modules
        if isinstance(node, ast.Name):
            self._name(node)
        elif isinstance(node, ast.Attribute):
            self._attribute(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if node not in self.tree.body:
                raise _Refused(node, "imports go at the top of the file, outside functions")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete, ast.For,
                               ast.withitem, ast.comprehension, ast.NamedExpr)):
            for target in _targets(node):
                self._target(target)
        elif isinstance(node, (ast.FunctionDef, ast.arg, ast.ExceptHandler)):
            name = getattr(node, "name", None) or getattr(node, "arg", None)
            if name:
                _dunder(node, name)
                self._not_a_module(node, name)
            for decorator in getattr(node, "decorator_list", ()):
                self._decorator(decorator)
        elif isinstance(node, ast.Global):
            for name in node.names:
                if name in modules or name not in self.scopes.top_level:
                    raise _Refused(node, f"`global {name}`: a function may only declare "
                                         "global a name this file defines at its top level")
        elif isinstance(node, ast.keyword) and node.arg in KEYWORDS:
            raise _Refused(node, f"`{node.arg}=` is not allowed in an exercise file: "
                                 f"{KEYWORDS[node.arg]}")
        elif isinstance(node, ast.ClassDef):
            raise _Refused(node, "class statements are not allowed in an exercise file: "
                                 "write functions")
        elif isinstance(node, (ast.AsyncFunctionDef, ast.AsyncFor, ast.AsyncWith, ast.Await)):
            raise _Refused(node, "async code is not allowed in an exercise file")
        elif isinstance(node, ast.Match):
            raise _Refused(node, "match statements are not allowed in an exercise file "
                                 "(their patterns read attributes by name): use if/elif")

    def _name(self, node: ast.Name) -> None:
        _dunder(node, node.id)
        if node.id in self.imports.modules:
            up = self.parent.get(id(node))
            if not (isinstance(node.ctx, ast.Load) and isinstance(up, ast.Attribute)
                    and up.value is node):
                raise _Refused(node, f"`{node.id}` is a module: use it only as the start of "
                                     f"a name, as in `{node.id}.<name>(...)`, never as a "
                                     "value (stored, passed, returned, compared)")

    def _attribute(self, node: ast.Attribute) -> None:
        up = self.parent.get(id(node))
        if isinstance(up, ast.Attribute) and up.value is node:
            return  # the outermost attribute of the chain reads the whole chain
        parts, base = [], node
        while isinstance(base, ast.Attribute):
            parts.append(base.attr)
            base = base.value
        parts.reverse()
        if isinstance(base, ast.Name) and self.scopes.is_typo(base.id):
            return  # reading the name raises NameError: no attribute of it is ever read
        module = self.imports.modules.get(base.id) if isinstance(base, ast.Name) else None
        path = base.id if module else ""
        for i, attribute in enumerate(parts):
            if attribute.startswith("_"):
                raise _Refused(node, f"`.{attribute}`: attributes starting with _ are private "
                                     "to the library")
            if attribute in INTROSPECTION:
                raise _Refused(node, f"`.{attribute}`: frame and code introspection is not "
                                     "allowed in an exercise file")
            if module is None:
                if attribute not in self.words.values:
                    raise _Refused(node, f"`.{attribute}` is not an attribute an exercise file "
                                         "may use (not in the kit's vocabulary, "
                                         "pytest_pallas_hints/vocabulary.toml)")
                continue
            path = f"{path}.{attribute}"
            if self.imports.is_package(f"{module}.{attribute}"):
                module = f"{module}.{attribute}"
                if i == len(parts) - 1:
                    raise _Refused(node, f"`{path}` is a module: use it only as the start of "
                                         f"a name, as in `{path}.<name>`, never as a value")
                continue
            self.imports.offered(node, module, attribute, path)
            module = None
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            raise _Refused(node, "assigning to or deleting an attribute is not allowed in an "
                                 "exercise file: the file may change only what it made")

    def _target(self, target) -> None:
        """A name, or a subscript of a name the file binds: o_ref[...] = ..."""
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._target(element)
        elif isinstance(target, ast.Starred):
            self._target(target.value)
        elif isinstance(target, ast.Name):
            self._not_a_module(target, target.id)
        elif isinstance(target, ast.Subscript):
            base = target
            while isinstance(base, ast.Subscript) or (isinstance(base, ast.Attribute)
                                                      and base.attr == "at"):
                base = base.value
            if not (isinstance(base, ast.Name) and base.id not in self.imports.modules
                    and base.id in self.scopes.bound):
                raise _Refused(target, "a store into something this file did not make is not "
                                       "allowed: store into your refs and arrays only "
                                       "(o_ref[...] = value)")
        # an Attribute target is refused where the attribute is read (_attribute)

    def _not_a_module(self, node, name: str) -> None:
        if name in self.imports.modules:
            raise _Refused(node, f"`{name}` is a module imported above: give this another "
                                 "name")

    def _decorator(self, decorator) -> None:
        callee = decorator.func if isinstance(decorator, ast.Call) else decorator
        if self.imports.dotted(callee) in self.words.decorators:
            return
        if (isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name)
                and callee.value.id not in self.imports.modules
                and f"<function>.{callee.attr}" in self.words.decorators):
            return
        allowed = ", ".join(sorted(d.rpartition(".")[2] for d in self.words.decorators))
        raise _Refused(decorator, f"`@{ast.unparse(callee)}` is not a decorator an exercise "
                                  f"file may use (allowed: {allowed})")


def _dunder(node, name: str) -> None:
    """A name starting with two underscores names what the file must not reach
    (``__builtins__``, ``__import__``, a module's ``__loader__``); one made of underscores
    alone (``lambda *_, **__: None`` in JAX's Hopper matmul) names nothing but what the
    file binds itself."""
    if name.startswith("__") and name.strip("_"):
        raise _Refused(node, f"`{name}`: dunder names are not allowed in an exercise file")


def _binds(symbol: symtable.Symbol) -> bool:
    return symbol.is_assigned() or symbol.is_imported() or _defines(symbol)


def _targets(node) -> list:
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, ast.Delete):
        return node.targets
    if isinstance(node, ast.withitem):
        return [node.optional_vars] if node.optional_vars is not None else []
    return [node.target]


def _defines(symbol: symtable.Symbol) -> bool:
    try:
        return symbol.is_namespace()  # a def (or lambda) binds its name
    except Exception:
        return False


def _is_module(module: str, name: str) -> bool:
    try:
        return isinstance(getattr(importlib.import_module(module), name, None), types.ModuleType)
    except ImportError:
        return False


# --------------------------------------------------------- for maintainers ---

def review(words: Vocabulary | None = None) -> dict[str, list[str]]:
    """Per module, the public names of the installed module that the vocabulary
    neither allows nor refuses: what a new release added, to sort into one list."""
    words = words or vocabulary()
    found = {}
    for module, names in words.modules.items():
        try:
            real = importlib.import_module(module)
        except ImportError:
            continue
        new = [n for n in dir(real) if not n.startswith("_") and n not in names
               and f"{module}.{n}" not in words.modules and not _refused_in(words, module, n)
               and not isinstance(getattr(real, n, None), types.ModuleType)]
        if new:
            found[module] = sorted(new)
    return found


def _refused_in(words: Vocabulary, module: str, name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in words.refused.get(module, ()))


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pytest_pallas_hints.rules",
                                     description="Check exercise files against the rule, or "
                                                 "review the vocabulary for a new JAX.")
    parser.add_argument("files", nargs="*", type=Path, help="exercise files to check")
    parser.add_argument("--review", action="store_true",
                        help="list the installed modules' names the vocabulary does not sort")
    args = parser.parse_args(argv)
    status = 0
    if args.review:
        for module, names in review().items():
            print(f"[{module}] neither allowed nor refused: {', '.join(names)}")
            status = 1
    for path in args.files:
        broken = check(path)
        print(f"{path}: " + (str(broken) if broken else "follows the rule"))
        status |= broken is not None
    return status


if __name__ == "__main__":
    raise SystemExit(main())
