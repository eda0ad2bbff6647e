"""Mutation testing of a chapter: do its tests fail for plausible wrong answers?

    python -m pytest_pallas_hints.mutate CHAPTER... | --all
        [--workers N] [--sample N --seed S] [--inputs-seed S] [--only ID...] [--list]
        [--timeout S] [--rewrite [--per-kind N]]

``--rewrite`` runs the inverse (see REWRITES below): changes of how the reference is
written that keep what it computes (einsum spelt as dot_general, exp as exp2, a
pl.when as an if-free jnp.where, a fori_loop as a Python loop...), each of which must
pass every test that reaches it; it prints, per chapter, rewrites tried and passed
and each refused one with the diagnosis the learner would read.

Each mutant is the reference chapter with one small semantic change, the kind a
learner makes (SPEC 5b):

  compare   a comparison flipped: < and <=, > and >=, == and !=
  plus1     1 added to an index, a bound or a slice (minus1: subtracted)
  minmax    min for max (jnp.minimum / jnp.maximum, jnp.min / jnp.max, min / max)
  when      a pl.when condition forced True (when_false: False)
  swap      two coordinates an index map returns swapped
  scale     a scale factor dropped (`x * sm_scale` -> `x`)

in every function of ``reference/<chapter>.py`` except argument validation (an
``if`` whose body raises). A mutant is *killed* when a test of the chapter that
reaches the mutated function fails on it. Its id, ``chapter:function:operator:n``,
is stable while the code is; a survivor that is equivalent to the reference (no
test could tell them apart) is listed, with one line on why, in
``tests/mutants/<chapter>.toml``::

    "flash:flash_attention:plus1:3" = "block_q rounded up to 8 twice: same blocks"

The command exits non-zero when a chapter kills less than ``THRESHOLD`` of its
mutants (equivalent ones aside) or a survivor is not listed. Mutants run in
worker processes that import JAX once and run pytest in-process, with the
compile cache, so that one mutant costs its tests and not a Python start.

The tests' inputs are drawn with seed 0 whatever sample is run (``--inputs-seed``
changes that): CI's sample, drawn with the commit's seed, then gives each mutant the
verdict the full run gave it, instead of failing on inputs that happen not to reach a
branch (a mutant that lives on some seeds is a test to strengthen, found by a run
with another ``--inputs-seed``).
"""
from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import os
import random
import sys
import tempfile
import time
import tomllib
from pathlib import Path

THRESHOLD = 0.95
FLIPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
         ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
SWAPS = {"minimum": "maximum", "maximum": "minimum", "min": "max", "max": "min",
         "argmin": "argmax", "argmax": "argmin"}
BOUND_CALLS = {"range": None, "fori_loop": 2, "ds": None, "cdiv": None, "multiple_of": 1}


@dataclasses.dataclass
class Mutant:
    id: str            # chapter:function:operator:n
    chapter: str
    function: str
    line: int
    change: str        # what changed, in a few words
    source: str        # the mutated function's source (decorators included)


# ------------------------------------------------------------------ mutants ---

def mutants(root: Path, chapter: str) -> list[Mutant]:
    """Every mutant of ``reference/<chapter>.py``, in source order."""
    path = root / "reference" / f"{chapter}.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef):
            continue
        _mark_index_maps(function)
        counts: dict[str, int] = {}
        for operator, index, change, apply in _sites(function):
            counts[operator] = counts.get(operator, 0) + 1
            mutated = copy.deepcopy(function)
            target = list(_walk(mutated))[index]
            apply(target, _parents(mutated))
            found.append(Mutant(
                id=f"{chapter}:{function.name}:{operator}:{counts[operator]}", chapter=chapter,
                function=function.name, line=getattr(list(_walk(function))[index], "lineno",
                                                      function.lineno),
                change=change, source=ast.unparse(mutated)))
    return found


def unchanged(root: Path, chapter: str) -> Mutant:
    """The reference's first kernel-calling function, unchanged: the control every
    mutant run is measured against."""
    source = (root / "reference" / f"{chapter}.py").read_text(encoding="utf-8")
    reached = selection(root, chapter)
    function = next(f for f in ast.parse(source).body
                    if isinstance(f, ast.FunctionDef) and reached.get(f.name))
    return Mutant(id=f"{chapter}:{function.name}:unchanged:0", chapter=chapter,
                  function=function.name, line=function.lineno, change="nothing",
                  source=ast.unparse(function))


def _walk(function):
    """The nodes of a function in a fixed order, argument validation left out."""
    todo = [function]
    while todo:
        node = todo.pop(0)
        yield node
        for child in ast.iter_child_nodes(node):
            if not _validation(child):
                todo.append(child)


def _validation(node) -> bool:
    """``if <bad argument>: raise ...`` (or a docstring): not a place to mutate."""
    if isinstance(node, ast.If) and node.body and isinstance(node.body[-1], ast.Raise):
        return True
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
        and isinstance(node.value.value, str)


def _parents(function) -> dict[int, tuple]:
    """id(node) -> (parent, field, index or None)."""
    parents = {}
    for parent in ast.walk(function):
        for field, value in ast.iter_fields(parent):
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, ast.AST):
                        parents[id(item)] = (parent, field, i)
            elif isinstance(value, ast.AST):
                parents[id(value)] = (parent, field, None)
    return parents


def _replace(node, new, parents) -> None:
    parent, field, index = parents[id(node)]
    if index is None:
        setattr(parent, field, new)
    else:
        getattr(parent, field)[index] = new


def _sites(function):
    """(operator, node index, change, apply(node, parents)) for every mutation site."""
    nodes = list(_walk(function))
    index_of = {id(n): i for i, n in enumerate(nodes)}
    sites = []

    def add(operator, node, change, apply):
        sites.append((operator, index_of[id(node)], change, apply))

    for node in nodes:
        if isinstance(node, ast.Compare):
            for k, op in enumerate(node.ops):
                if type(op) in FLIPS:
                    new = FLIPS[type(op)]
                    add("compare", node, f"{_op(op)} -> {_op(new())}",
                        lambda n, p, k=k, new=new: n.ops.__setitem__(k, new()))
        for expr in _bounds(node):
            text = ast.unparse(expr)
            for operator, sign in (("plus1", ast.Add), ("minus1", ast.Sub)):
                add(operator, expr, f"{text} -> {text} {'+' if sign is ast.Add else '-'} 1",
                    lambda n, p, sign=sign: _replace(
                        n, ast.BinOp(left=n, op=sign(), right=ast.Constant(1)), p))
        name = _called_name(node)
        if name in SWAPS:
            add("minmax", node, f"{name} -> {SWAPS[name]}",
                lambda n, p: _rename(n, SWAPS[_called_name(n)]))
        if _is_when(node) and node.args:
            for operator, value in (("when", True), ("when_false", False)):
                add(operator, node, f"pl.when({ast.unparse(node.args[0])}) -> pl.when({value})",
                    lambda n, p, value=value: n.args.__setitem__(0, ast.Constant(value)))
        for pair in _index_map_pairs(node):
            a, b = pair
            add("swap", node, f"index map returns {ast.unparse(node.elts[a])} and "
                              f"{ast.unparse(node.elts[b])} swapped",
                lambda n, p, a=a, b=b: _swap(n, a, b))
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
            for keep, drop in ((node.left, node.right), (node.right, node.left)):
                if _is_scale(drop) and not (isinstance(node.op, ast.Div) and drop is node.left):
                    side = "left" if keep is node.left else "right"
                    add("scale", node, f"{ast.unparse(node)} -> {ast.unparse(keep)}",
                        lambda n, p, side=side: _replace(n, getattr(n, side), p))
    return sites


def _bounds(node) -> list:
    """The index, bound and slice expressions directly under ``node``."""
    found = []
    if isinstance(node, ast.Subscript):
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for part in parts:
            if isinstance(part, ast.Slice):
                found += [b for b in (part.lower, part.upper) if b is not None]
            elif not (isinstance(part, ast.Constant) and part.value in (Ellipsis, None)):
                found.append(part)
    elif isinstance(node, ast.Compare):
        found += [node.left, *node.comparators]
    elif isinstance(node, ast.Call):
        name = _called_name(node)
        if name in BOUND_CALLS:
            count = BOUND_CALLS[name]
            found += node.args[:count] if count else node.args
    elif isinstance(node, ast.Lambda):
        body = node.body
        found += body.elts if isinstance(body, ast.Tuple) else [body]
    elif isinstance(node, ast.Return) and _in_index_map(node):
        value = node.value
        found += value.elts if isinstance(value, ast.Tuple) else []
    return [e for e in found if not isinstance(e, (ast.Starred, ast.Slice))
            and not (isinstance(e, ast.Constant) and type(e.value) is not int)]


def _in_index_map(node) -> bool:
    return getattr(node, "_index_map", False)


def _index_map_pairs(node) -> list[tuple[int, int]]:
    """Pairs of non-constant coordinates of a tuple an index map returns."""
    if not (isinstance(node, ast.Tuple) and getattr(node, "_index_map", False)):
        return []
    spots = [i for i, e in enumerate(node.elts) if not isinstance(e, ast.Constant)]
    return [(a, b) for n, a in enumerate(spots) for b in spots[n + 1:]
            if ast.unparse(node.elts[a]) != ast.unparse(node.elts[b])]


def _mark_index_maps(function) -> None:
    """Marks what index maps return: a lambda's tuple body, and the tuples returned by
    a nested function that is handed to a pl.BlockSpec."""
    specs = [n for n in ast.walk(function) if isinstance(n, ast.Call)
             and _called_name(n) == "BlockSpec"]
    handed = {a.id for call in specs for a in [*call.args[1:2],
                                              *[k.value for k in call.keywords
                                                if k.arg == "index_map"]]
              if isinstance(a, ast.Name)}
    for node in ast.walk(function):
        if isinstance(node, ast.Lambda) and isinstance(node.body, ast.Tuple):
            node.body._index_map = True
        if isinstance(node, ast.FunctionDef) and node.name in handed:
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple):
                    ret._index_map = True
                    ret.value._index_map = True


def _called_name(node) -> str | None:
    """``minimum`` for ``jnp.minimum(...)`` or ``jnp.minimum``; ``max`` for ``max(...)``."""
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Name) and isinstance(node, ast.Call):
        return target.id
    return None


def _rename(node, name: str) -> None:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        target.attr = name
    else:
        target.id = name


def _is_when(node) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
        and node.func.attr == "when"


def _swap(node, a: int, b: int) -> None:
    node.elts[a], node.elts[b] = node.elts[b], node.elts[a]


def _is_scale(node) -> bool:
    text = ast.unparse(node)
    return "scale" in text or "sqrt" in text


def _op(op) -> str:
    return {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
            ast.NotEq: "!="}[type(op)]



# ----------------------------------------------------------------- rewrites ---
# The inverse of mutants (SPEC 5b, right code passes): a rewrite changes how the
# reference is written and not what it computes, and a chapter's tests must pass on
# every one of them. Each is a general rewrite of the source, not a per-puzzle one.

LOG2E = 1.4426950408889634
REWRITES = {
    "commute": "a * b -> b * a, a + b -> b + a (operands that are arrays or numbers)",
    "exp2": "jnp.exp(x) -> jnp.exp2(x * log2(e))",
    "dot": "jnp.dot(a, b) -> lax.dot_general with the contracting dims spelt out",
    "einsum": "jnp.einsum('<spec>', a, b) -> lax.dot_general (+ a transpose when the "
              "spec's output order is not dot_general's)",
    "when_cond": "@pl.when(c) def f() -> lax.cond(c, f, lambda: None)",
    "when_where": "@pl.when(c) over stores only -> the stores, if-free: "
                  "ref[i] = jnp.where(c, value, ref[i])",
    "fori_python": "lax.fori_loop(lo, hi, body, carry) with static bounds -> a Python loop",
    "cdiv": "pl.cdiv(a, b) -> (a + b - 1) // b",
}


def rewrites(root: Path, chapter: str) -> list[Mutant]:
    """Every semantics-preserving rewrite of ``reference/<chapter>.py``, one site each,
    in source order (ids ``chapter:function:rewrite:n``)."""
    path = root / "reference" / f"{chapter}.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef):
            continue
        counts: dict[str, int] = {}
        for operator, index, change, apply, helper in _rewrite_sites(function):
            counts[operator] = counts.get(operator, 0) + 1
            rewritten = copy.deepcopy(function)
            target = list(_walk(rewritten))[index]
            apply(target, _parents(rewritten))
            ast.fix_missing_locations(rewritten)
            found.append(Mutant(
                id=f"{chapter}:{function.name}:{operator}:{counts[operator]}", chapter=chapter,
                function=function.name,
                line=getattr(list(_walk(function))[index], "lineno", function.lineno),
                change=change, source=helper + ast.unparse(rewritten)))
    return found


_STATIC_FORI = '''
def _static_fori(lower, upper, body, carry):
    """lax.fori_loop(lower, upper, body, carry) as a Python loop (bounds known here)."""
    if not (isinstance(lower, int) and isinstance(upper, int)):
        raise TypeError("fori_python: the loop's bounds are not static here")
    for i in range(lower, upper):
        carry = body(i, carry)
    return carry


'''


def _rewrite_sites(function):
    """(operator, node index, change, apply(node, parents), helper source) per site."""
    nodes = list(_walk(function))
    index_of = {id(n): i for i, n in enumerate(nodes)}
    sites = []

    def add(operator, node, change, apply, helper=""):
        sites.append((operator, index_of[id(node)], change, apply, helper))

    for node in nodes:
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add)) \
                and _numeric(node.left) and _numeric(node.right):
            add("commute", node, f"{ast.unparse(node)} -> "
                                 f"{ast.unparse(ast.BinOp(node.right, node.op, node.left))}",
                lambda n, p: _commute(n))
        name = _called_name(node)
        if isinstance(node, ast.Call) and name == "exp" and len(node.args) == 1 \
                and not node.keywords:
            add("exp2", node, f"{ast.unparse(node)} -> exp2(x * log2 e)", _to_exp2)
        if isinstance(node, ast.Call) and name == "dot" and len(node.args) == 2 \
                and _dotted(node.func).startswith(("jnp.", "jax.numpy.")):
            add("dot", node, f"{ast.unparse(node.func)} -> lax.dot_general", _to_dot_general)
        if isinstance(node, ast.Call) and name == "einsum" and len(node.args) == 3 \
                and _einsum_plan(node.args[0]) is not None:
            add("einsum", node, f"einsum({ast.unparse(node.args[0])}) -> lax.dot_general",
                _einsum_to_dot_general)
        if isinstance(node, ast.FunctionDef):
            when = [d for d in node.decorator_list if _is_when(d) and d.args]
            if when and node.name != function.name:
                condition = ast.unparse(when[0].args[0])
                add("when_cond", node, f"@pl.when({condition}) {node.name} -> lax.cond",
                    _when_to_cond)
                if _stores_only(node):
                    add("when_where", node, f"@pl.when({condition}) {node.name} -> "
                                            "jnp.where stores", _when_to_where)
        if isinstance(node, ast.Call) and name == "fori_loop" and len(node.args) == 4 \
                and not node.keywords:
            add("fori_python", node, f"{ast.unparse(node)[:60]} -> a Python loop",
                lambda n, p: _rename_call(n, "_static_fori"), _STATIC_FORI)
        if isinstance(node, ast.Call) and name == "cdiv" and len(node.args) == 2:
            a, b = (ast.unparse(x) for x in node.args)
            add("cdiv", node, f"{ast.unparse(node)} -> ({a} + {b} - 1) // {b}", _cdiv)
    return sites


def _numeric(node) -> bool:
    """An operand that commutes: not a sequence or a string (a tuple + a tuple is not
    a sum), nor a shape or a slice of one."""
    if isinstance(node, (ast.Tuple, ast.List, ast.JoinedStr, ast.ListComp)):
        return False
    if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
        return False
    text = ast.unparse(node)
    return "shape" not in text and not (isinstance(node, ast.Subscript)
                                        and isinstance(node.slice, ast.Slice)) \
        and not (isinstance(node, ast.BinOp) and not (_numeric(node.left)
                                                      and _numeric(node.right)))


def _commute(node) -> None:
    node.left, node.right = node.right, node.left


def _dotted(node) -> str:
    return ast.unparse(node)


def _parse(text: str):
    return ast.parse(text, mode="eval").body


def _to_exp2(node, parents) -> None:
    x = ast.unparse(node.args[0])
    _replace(node, _parse(f"jnp.exp2(({x}) * {LOG2E!r})"), parents)


def _to_dot_general(node, parents) -> None:
    a, b = (ast.unparse(x) for x in node.args)
    keywords = "".join(f", {k.arg}={ast.unparse(k.value)}" for k in node.keywords)
    new = _parse(f"jax.lax.dot_general({a}, {b}, (((({a}).ndim - 1,), "
                 f"(max(({b}).ndim - 2, 0),)), ((), ())){keywords})")
    _replace(node, new, parents)


def _einsum_plan(spec):
    """(contracting, batch, transpose) for a two-operand einsum spec without
    ellipses or repeated letters, in dot_general's terms; None otherwise."""
    if not (isinstance(spec, ast.Constant) and isinstance(spec.value, str)):
        return None
    text = spec.value.replace(" ", "")
    if "..." in text or "->" not in text:
        return None
    inputs, out = text.split("->")
    if inputs.count(",") != 1:
        return None
    a, b = inputs.split(",")
    if any(len(set(s)) != len(s) for s in (a, b, out)):
        return None
    batch = [c for c in a if c in b and c in out]
    contract = [c for c in a if c in b and c not in out]
    if any(c not in a and c not in b for c in out) or \
            any(c not in out and c not in contract for c in a + b):
        return None
    order = batch + [c for c in a if c not in b] + [c for c in b if c not in a]
    dims = (((tuple(a.index(c) for c in contract), tuple(b.index(c) for c in contract)),
             (tuple(a.index(c) for c in batch), tuple(b.index(c) for c in batch))))
    perm = tuple(order.index(c) for c in out)
    return dims, None if perm == tuple(range(len(perm))) else perm


def _einsum_to_dot_general(node, parents) -> None:
    dims, perm = _einsum_plan(node.args[0])
    a, b = (ast.unparse(x) for x in node.args[1:])
    keywords = "".join(f", {k.arg}={ast.unparse(k.value)}" for k in node.keywords)
    text = f"jax.lax.dot_general({a}, {b}, {dims!r}{keywords})"
    if perm is not None:
        text = f"jnp.transpose({text}, {perm!r})"
    _replace(node, _parse(text), parents)


def _when_to_cond(node, parents) -> None:
    when = next(d for d in node.decorator_list if _is_when(d) and d.args)
    node.decorator_list.remove(when)
    parent, field, index = parents[id(node)]
    call = ast.parse(f"jax.lax.cond({ast.unparse(when.args[0])}, {node.name}, "
                     "lambda: None)").body[0]
    getattr(parent, field).insert(index + 1, call)


def _stores_only(node) -> bool:
    """A pl.when body that only stores into refs (``ref[i] = value``), with no dot,
    copy or nested control: the stores can be written if-free."""
    body = [s for s in node.body if not _validation(s)]
    return bool(body) and all(
        isinstance(s, ast.Assign) and len(s.targets) == 1
        and isinstance(s.targets[0], ast.Subscript) for s in body) \
        and not any(_called_name(n) in ("dot", "einsum", "dot_general", "matmul")
                    for n in ast.walk(node) if isinstance(n, ast.Call))


def _when_to_where(node, parents) -> None:
    when = next(d for d in node.decorator_list if _is_when(d) and d.args)
    condition = ast.unparse(when.args[0])
    parent, field, index = parents[id(node)]
    stores = []
    for s in node.body:
        if _validation(s):
            continue
        target = ast.unparse(s.targets[0])
        stores.append(ast.parse(f"{target} = jnp.where({condition}, {ast.unparse(s.value)}, "
                                f"{target})").body[0])
    getattr(parent, field)[index:index + 1] = stores


def _rename_call(node, name: str) -> None:
    node.func = ast.Name(id=name, ctx=ast.Load())


def _cdiv(node, parents) -> None:
    a, b = (ast.unparse(x) for x in node.args)
    _replace(node, _parse(f"(({a}) + ({b}) - 1) // ({b})"), parents)


# ---------------------------------------------------------- which tests run ---

def selection(root: Path, chapter: str) -> dict[str, set[str]]:
    """Reference function -> the test functions of the chapter that reach it (through
    the chapter's functions they call, and the functions those call)."""
    source = ast.parse((root / "reference" / f"{chapter}.py").read_text(encoding="utf-8"))
    defined = {f.name: f for f in source.body if isinstance(f, ast.FunctionDef)}
    calls = {name: {n.id for n in ast.walk(f) if isinstance(n, ast.Name) and n.id in defined}
             for name, f in defined.items()}
    tests = ast.parse((root / "exercises" / f"test_{chapter}.py").read_text(encoding="utf-8"))
    helpers = {f.name: f for f in tests.body if isinstance(f, ast.FunctionDef)}

    def used_by(function, seen=()) -> set[str]:
        names = {n.attr for n in ast.walk(function) if isinstance(n, ast.Attribute)
                 and isinstance(n.value, ast.Name) and n.value.id == chapter}
        for n in ast.walk(function):  # test helpers (check_grid...) count as the test's
            if isinstance(n, ast.Name) and n.id in helpers and n.id not in seen:
                names |= used_by(helpers[n.id], (*seen, n.id))
        return names

    reached: dict[str, set[str]] = {name: set() for name in defined}
    for name, test in helpers.items():
        if not name.startswith("test_"):
            continue
        todo, closure = list(used_by(test)), set()
        while todo:
            f = todo.pop()
            if f in defined and f not in closure:
                closure.add(f)
                todo.extend(calls[f])
        for f in closure:
            reached[f].add(name)
    return reached


# ----------------------------------------------------------------- running ---

@dataclasses.dataclass
class Outcome:
    mutant: Mutant
    verdict: str       # "killed", "survived", "not reached" (no test reaches it)
    by: str = ""       # the test that killed it
    seconds: float = 0.0


def _run_one(job) -> tuple:
    """In a worker: the chapter's tests that reach the mutant, against it."""
    root, mutant_id, chapter, source, tests, seed, timeout, folder = job
    if not tests:
        return mutant_id, "not reached", "", 0.0
    import pytest

    patch = Path(folder) / chapter / f"{mutant_id.replace(':', '_')}.py"
    patch.parent.mkdir(parents=True, exist_ok=True)
    patch.write_text(f'"""mutant {mutant_id}"""\n{source}\n', encoding="utf-8")
    collector = _Collector()
    before = set(sys.modules)
    started = time.monotonic()
    args = [f"exercises/test_{chapter}.py", "--reference", "--pallas-patch", str(patch), "-x",
            "-q", "-p", "no:randomly", "--no-scoreboard", f"--seed={seed}",
            f"--pallas-timeout={timeout}", "-o", f"cache_dir={Path(folder) / 'cache'}",
            "-m", "not tpu", "-k", " or ".join(sorted(tests))]
    cwd = os.getcwd()
    devnull = open(os.devnull, "w")
    saved = sys.stdout, sys.stderr
    try:
        os.chdir(root)
        sys.stdout = sys.stderr = devnull
        pytest.main(args, plugins=[collector])
    except BaseException as error:  # a mutant that breaks pytest itself is caught too
        collector.failed = collector.failed or f"pytest stopped: {type(error).__name__}"
    finally:
        sys.stdout, sys.stderr = saved
        devnull.close()
        os.chdir(cwd)
        for name in set(sys.modules) - before:
            if not _kept(name):
                del sys.modules[name]
        patch.unlink(missing_ok=True)
    seconds = time.monotonic() - started
    if collector.failed:
        return mutant_id, "killed", collector.failed, seconds
    return mutant_id, "survived" if collector.passed else "not reached", "", seconds


def _kept(module: str) -> bool:
    """Whether a module a run imported stays for the next run: JAX's own do (its MLIR
    dialects, loaded by the first TPU lowering, cannot be registered twice in one
    process); the chapter and test modules go, so the next run imports them afresh."""
    return module.split(".")[0] in ("jax", "jaxlib")


class _Collector:
    def __init__(self):
        self.passed, self.failed = 0, ""

    def pytest_runtest_logreport(self, report):
        if report.failed and not self.failed:
            self.failed = report.nodeid.split("::")[-1]
            said = [line.strip() for line in str(report.longreprtext).splitlines()
                    if line.strip() and not set(line.strip()) <= set("-=_^~ ")]
            if said:   # what the learner would read: the diagnosis's last lines
                self.failed += " — " + " | ".join(said[-3:])[:400]
        elif report.passed and report.when == "call":
            self.passed += 1


def _warm_up():
    """Imports JAX and the kit once per worker."""
    import importlib

    for module in ("jax", "jax.experimental.pallas", "pytest_pallas_hints.checking",
                   "pytest_pallas_hints.plugin"):
        importlib.import_module(module)


def run(root: Path, chosen: list[Mutant], *, workers: int, seed: int, timeout: float,
        progress=None) -> list[Outcome]:
    """Runs every chosen mutant against its chapter's tests, ``workers`` at a time."""
    import concurrent.futures
    import multiprocessing

    reached = {chapter: selection(root, chapter) for chapter in {m.chapter for m in chosen}}
    by_id = {m.id: m for m in chosen}
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="pallas-mutants-") as folder:
        jobs = [(str(root), m.id, m.chapter, m.source, reached[m.chapter].get(m.function, set()),
                 seed, timeout, folder) for m in chosen]
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=context, initializer=_warm_up) as pool:
            for chapter in sorted(reached):  # the harness itself: an unchanged function passes
                control = unchanged(root, chapter)
                job = (str(root), control.id, chapter, control.source,
                       reached[chapter].get(control.function, set()), seed, timeout, folder)
                _, verdict, by, _ = pool.submit(_run_one, job).result()
                if verdict != "survived":
                    raise SystemExit(f"{chapter}: the unchanged reference does not pass its "
                                     f"tests under the mutation harness ({verdict} {by}): "
                                     "fix that first, every mutant would look killed")
            for mutant_id, verdict, by, seconds in pool.map(_run_one, jobs):
                outcome = Outcome(by_id[mutant_id], verdict, by, seconds)
                outcomes.append(outcome)
                if progress:
                    progress(outcome)
    return outcomes


# ----------------------------------------------------------------- results ---

def equivalents(root: Path, chapter: str) -> dict[str, str]:
    """Survivors listed as equivalent to the reference: id -> why."""
    path = root / "tests" / "mutants" / f"{chapter}.toml"
    if not path.exists():
        return {}
    return {str(k): str(v) for k, v in tomllib.loads(path.read_text(encoding="utf-8")).items()}


def report(root: Path, chapter: str, outcomes: list[Outcome], total: int,
           sampled: bool) -> tuple[list[str], bool]:
    """The lines for one chapter, and whether it meets the bar."""
    listed = equivalents(root, chapter)
    mine = [o for o in outcomes if o.mutant.chapter == chapter]
    killed = [o for o in mine if o.verdict == "killed"]
    equivalent = [o for o in mine if o.verdict != "killed" and o.mutant.id in listed]
    unlisted = [o for o in mine if o.verdict != "killed" and o.mutant.id not in listed]
    judged = len(mine) - len(equivalent)
    share = len(killed) / judged if judged else 1.0
    seconds = sum(o.seconds for o in mine)
    head = (f"{chapter}: {len(killed)} of {judged} mutants killed ({share:.1%})"
            + (f", {len(equivalent)} listed as equivalent" if equivalent else "")
            + (f" · a sample of {len(mine)} of {total}" if sampled else "")
            + f" · {seconds:.0f} s of tests")
    lines = [head]
    for o in unlisted:
        lines.append(f"  {o.verdict:<11} {o.mutant.id}  line {o.mutant.line}: {o.mutant.change}")
    stale = sorted(set(listed) - {o.mutant.id for o in mine} - (
        set() if sampled else set()))
    if stale and not sampled:
        lines.append(f"  (listed in tests/mutants/{chapter}.toml but not a surviving mutant: "
                     + ", ".join(stale) + ")")
    return lines, share >= THRESHOLD and not unlisted


def rewrite_report(chapter: str, outcomes: list[Outcome], total: int,
                   sampled: bool) -> tuple[list[str], bool]:
    """The lines for one chapter's rewrites, and whether every one passed (a rewrite no
    test reaches is counted apart: it proves nothing)."""
    mine = [o for o in outcomes if o.mutant.chapter == chapter]
    tried = [o for o in mine if o.verdict != "not reached"]
    passed = [o for o in tried if o.verdict == "survived"]
    by_kind: dict[str, list[int]] = {}
    for o in tried:
        counts = by_kind.setdefault(o.mutant.id.split(":")[2], [0, 0])
        counts[0] += 1
        counts[1] += o.verdict == "survived"
    lines = [f"{chapter}: {len(passed)} of {len(tried)} rewrites passed"
             + (f" · a sample of {len(mine)} of {total}" if sampled else "")
             + (f" · {len(mine) - len(tried)} reached by no test" if len(mine) > len(tried)
                else "")
             + " · " + ", ".join(f"{k} {p}/{t}" for k, (t, p) in sorted(by_kind.items()))]
    for o in tried:
        if o.verdict != "survived":
            lines.append(f"  refused {o.mutant.id}  line {o.mutant.line}: {o.mutant.change}\n"
                         f"      by {o.by}")
    return lines, len(passed) == len(tried)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_pallas_hints.mutate",
        description="Mutation testing: apply small semantic changes to a reference "
                    "chapter and check that its tests fail on each.")
    parser.add_argument("chapters", nargs="*", help="chapter names (or --all)")
    parser.add_argument("--all", action="store_true", help="every chapter of the kit")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: one per core)")
    parser.add_argument("--sample", type=int, default=0, metavar="N",
                        help="run N mutants per chapter, drawn with --seed (default: all)")
    parser.add_argument("--seed", type=int, default=0,
                        help="the seed that draws the sample (default 0)")
    parser.add_argument("--inputs-seed", type=int, default=0, metavar="S",
                        help="the seed of the tests' inputs (default 0: the inputs of the "
                             "full run, so that a sample's verdicts are the full run's)")
    parser.add_argument("--per-kind", type=int, default=0, metavar="N",
                        help="with --rewrite: N rewrites of each kind per chapter, drawn "
                             "with --seed (default: all)")
    parser.add_argument("--only", nargs="*", default=[], metavar="ID",
                        help="run only these mutant ids")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--rewrite", action="store_true",
                        help="the inverse: semantics-preserving rewrites of the reference "
                             "(REWRITES), every one of which must pass; prints tried and "
                             "passed, and each refused rewrite with the test's words")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds a test may run before it counts as hung (default 60)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the kit (default: .)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    known = sorted(p.stem for p in (root / "exercises" / "hints").glob("*.toml"))
    names = known if args.all else args.chapters
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        parser.error(f"name chapters from {', '.join(known)}, or --all"
                     + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
    make = rewrites if args.rewrite else mutants
    everything = {name: make(root, name) for name in names}
    chosen = []
    for name, found in everything.items():
        picked = [m for m in found if not args.only or m.id in args.only]
        if args.per_kind:
            kinds: dict[str, list] = {}
            for m in picked:
                kinds.setdefault(m.id.split(":")[2], []).append(m)
            draw = random.Random(f"{args.seed}:{name}")
            picked = sorted((m for ms in kinds.values()
                             for m in (draw.sample(ms, args.per_kind)
                                       if len(ms) > args.per_kind else ms)), key=found.index)
        if args.sample and len(picked) > args.sample:
            picked = sorted(random.Random(f"{args.seed}:{name}").sample(picked, args.sample),
                            key=found.index)
        chosen += picked
    if args.list:
        for m in chosen:
            print(f"{m.id}  line {m.line}: {m.change}")
        return 0
    started = time.monotonic()
    print(f"{'rewrite' if args.rewrite else 'mutation'} testing {', '.join(names)}: "
          f"{len(chosen)} {'rewrites' if args.rewrite else 'mutants'}"
          + (f" (a sample of {args.sample} per chapter, seed {args.seed})" if args.sample else "")
          + f", inputs seed {args.inputs_seed}"
          + f", {args.workers} workers", flush=True)
    outcomes = run(root, chosen, workers=args.workers, seed=args.inputs_seed,
                   timeout=args.timeout,
                   progress=lambda o: print("." if o.verdict == "killed" else "s",
                                            end="", flush=True))
    print(f"\n{time.monotonic() - started:.0f} s")
    ok = True
    if args.rewrite:
        for name in names:
            lines, good = rewrite_report(name, outcomes, len(everything[name]),
                                         bool(args.sample or args.only or args.per_kind))
            ok &= good
            print("\n".join(lines))
        return 0 if ok else 1
    for name in names:
        lines, good = report(root, name, outcomes, len(everything[name]),
                             bool(args.sample or args.only))
        ok &= good
        print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
