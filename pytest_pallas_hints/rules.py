"""The rule an exercise file follows, checked from its syntax tree before it runs.

In a graded run the learner's code runs in the same process as the tests that
judge it, so the rule is the barrier against code that would patch the judge.
It is an allowlist:

* imports only from ``ALLOWED`` (plus a chapter's own ``imports`` in its hints
  file), and nothing from ``jax.experimental.pallas.ops`` (JAX's own kernels);
* every attribute chain on an imported module is resolved against the real
  module: one that reaches a module not on the list is refused
  (``numpy.ma.core.builtins``, ``jax.version.os``);
* no attribute or name that starts with ``_`` (no dunders, no privates);
* no frame, code or generator introspection (``f_back``, ``gi_frame``...);
* none of the builtins that reach around the language (``getattr``, ``eval``,
  ``open``, ``type``...).

The same check runs locally, so a learner never sees a grade that differs from
their own run. It raises the bar and makes any attempt visible in the diff; it
is not a sandbox.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import types
from pathlib import Path

ALLOWED = ("functools", "itertools", "math", "numpy", "jax", "jax.numpy", "jax.lax", "jax.nn",
           "jax.experimental.pallas", "jax.experimental.pallas.tpu")
NEVER = ("jax.experimental.pallas.ops",)
INTROSPECTION = {"f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace",
                 "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await",
                 "ag_frame", "ag_code", "tb_frame", "tb_next", "co_code", "co_consts",
                 "func_globals", "func_code"}
BUILTINS = {"getattr", "setattr", "delattr", "vars", "type", "globals", "locals", "exec",
            "eval", "compile", "open", "__import__", "breakpoint", "dir", "input", "help",
            "memoryview", "object", "super", "classmethod", "staticmethod", "property"}


@dataclasses.dataclass(frozen=True)
class Broken:
    """The first place a file breaks the rule."""
    line: int
    rule: str
    code: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.rule}   {self.code.strip()}"


def check(path: Path, extra: tuple[str, ...] = ()) -> Broken | None:
    """The first line of ``path`` that breaks the rule, or None."""
    source = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None  # the import reports it, with its own line
    return check_tree(tree, source, tuple(ALLOWED) + tuple(extra))


def check_tree(tree, source: str, allowed: tuple[str, ...]) -> Broken | None:
    lines = source.splitlines()

    def broken(node, rule):
        return Broken(node.lineno, rule, lines[node.lineno - 1] if node.lineno <= len(lines)
                      else "")

    modules: dict[str, object] = {}   # local name -> the real module or object it names
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                why = _refused_module(alias.name, allowed)
                if why:
                    return broken(node, why)
                root = alias.name if alias.asname else alias.name.split(".")[0]
                modules[alias.asname or root] = _import(root)
        elif isinstance(node, ast.ImportFrom):
            if node.level or not node.module:
                return broken(node, "relative imports are not allowed in an exercise file")
            for alias in node.names:
                if alias.name == "*":
                    return broken(node, "`from ... import *` is not allowed: import names "
                                        "one by one")
                if alias.name.startswith("_"):
                    return broken(node, f"`{alias.name}`: names starting with _ are private")
                value = _lookup(node.module, alias.name)
                if isinstance(value, types.ModuleType):  # from jax.experimental import pallas
                    why = _refused_module(f"{node.module}.{alias.name}", allowed)
                else:
                    why = _refused_module(node.module, allowed, f"from {node.module} import")
                if why:
                    return broken(node, why)
                modules[alias.asname or alias.name] = value
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id.startswith("__") or node.id in BUILTINS:
                return broken(node, f"`{node.id}` is not allowed in an exercise file "
                                    "(it reaches around the language)")
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                return broken(node, f"`.{node.attr}`: attributes starting with _ are "
                                    "private to the library")
            if node.attr in INTROSPECTION:
                return broken(node, f"`.{node.attr}`: frame and code introspection is not "
                                    "allowed in an exercise file")
            why = _refused_chain(node, modules, allowed)
            if why:
                return broken(node, why)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name.startswith("__"):
                return broken(node, f"`{node.name}`: dunder names are not allowed")
        elif isinstance(node, ast.arg) and node.arg.startswith("__"):
            return broken(node, f"`{node.arg}`: dunder names are not allowed")
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and any(
                n.startswith("__") for n in node.names):
            return broken(node, "dunder names are not allowed")
    return None


def _refused_module(name: str, allowed, said: str = "") -> str | None:
    if any(name == never or name.startswith(never + ".") for never in NEVER):
        return (f"`{name}` is JAX's own library of kernels: the puzzles are to write them "
                "yourself")
    if name not in allowed:
        return (f"`{said or 'import ' + name}` is not allowed in an exercise file; allowed: "
                + ", ".join(allowed))
    return None


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _lookup(module: str, name: str):
    found = _import(module)
    value = getattr(found, name, None) if found is not None else None
    if value is None:
        value = _import(f"{module}.{name}")
    return value


def _refused_chain(node: ast.Attribute, modules: dict, allowed) -> str | None:
    """Follows ``a.b.c`` from an imported name through the real objects; refuses one
    that reaches a module not on the list."""
    parts = []
    current = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    if not isinstance(current, ast.Name) or current.id not in modules:
        return None
    value = modules[current.id]
    path = getattr(value, "__name__", current.id)
    for attribute in reversed(parts):
        if value is None:
            return None
        try:
            value = getattr(value, attribute)
        except AttributeError:
            return None
        path = f"{path}.{attribute}"
        if isinstance(value, types.ModuleType) and value.__name__ not in allowed:
            return (f"`{path}` reaches the module {value.__name__}, which an exercise file "
                    "may not use")
    return None

