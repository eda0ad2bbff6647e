"""What a puzzle's lesson requires of the learner's program, checked from its trace.

A test declares it::

    TILED = Structure(inside={"add"})                        # the addition in the kernel
    run(basics.add_one_tiled, x, bm=8, structure=TILED.where(grid=(4,), blocks={0: (8, 128)}))

and ``check(program, structure, sources)`` returns the findings, most basic
first, that say how the program falls short:

  callback         a host callback (pure_callback, io_callback) computes something;
  no_kernel        no pallas_call at all;
  foreign_kernel   a kernel not defined in the learner's chapter file (JAX's own);
  unused_kernel    a kernel whose output the result does not use (a decoy);
  not_from_kernel  an output that no kernel produced;
  outside          work done by JAX ops around the kernels that the puzzle does
                   not allow (``outside``; reshapes are always free);
  missing_core     an operation the lesson is about that no kernel performs;
  kernel_count     more or fewer pallas_calls than the puzzle needs;
  whole_array      one grid step over everything where the lesson is the grid;
  grid, blocks     another grid, or other block shapes, than the lesson's;
  no_prefetch      no scalar prefetch where the lesson is scalar prefetch;
  parallel_reduction  a grid axis marked "parallel" along which an output block
                   stays put (on a TPU with two cores each would own half the
                   sum): always checked, it is wrong in every puzzle.

Nothing here runs JAX: it reads a ``program.Program``.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from .frozen import np

from .diagnose import Finding

# Ops that never do work: they relabel the same bytes.
FREE = frozenset({"reshape", "squeeze", "expand_dims", "bitcast_convert_type", "copy",
                  "copy_p", "pvary", "optimization_barrier", "sharding_constraint"})

# Plain words for the ops a learner is most likely to leave outside a kernel.
WORDS = {
    "dot_general": "the matmul (jnp.dot)", "exp": "the exp", "exp2": "the exp",
    "log": "the log", "tanh": "the tanh", "logistic": "the sigmoid", "erf": "the erf",
    "reduce_sum": "a sum", "reduce_max": "a max", "reduce_min": "a min",
    "argmax": "an argmax", "cumsum": "a cumulative sum", "add": "an addition",
    "sub": "a subtraction", "mul": "a multiplication", "div": "a division",
    "max": "a maximum", "min": "a minimum", "neg": "a negation", "sqrt": "a square root",
    "rsqrt": "a square root", "pow": "a power", "integer_pow": "a power",
    "select_n": "a select (jnp.where)", "rev": "a reversal", "transpose": "a transpose",
    "pad": "padding", "concatenate": "a concatenation", "broadcast_in_dim": "a broadcast",
    "convert_element_type": "a cast (astype)", "slice": "a slice",
    "dynamic_slice": "a slice", "dynamic_update_slice": "an update of a slice",
    "gather": "an indexed read (gather)", "scatter": "an indexed write (scatter)",
    "scatter-add": "an indexed add (scatter)", "sort": "a sort", "while": "a loop",
    "scan": "a loop", "cond": "a branch", "iota": "an iota", "gt": "a comparison",
    "lt": "a comparison", "ge": "a comparison", "le": "a comparison", "eq": "a comparison",
    "dma_start": "a DMA of your own (pltpu.make_async_copy(...).start())",
    "dma_wait": "a wait for a DMA (.wait() on a copy)",
}
# Most telling first: a matmul outside a kernel says more than a cast does.
_RANK = ["dot_general", "exp", "exp2", "log", "tanh", "logistic", "erf", "reduce_sum",
         "reduce_max", "reduce_min", "cumsum", "argmax", "mul", "div", "add", "sub", "max",
         "min", "select_n", "rev", "sort", "gather", "scatter", "scatter-add"]


@dataclasses.dataclass(frozen=True)
class Structure:
    """What a puzzle's lesson requires of the program.

    kernels: exact number of pallas_calls (None: at least one);
    inside:  primitives (``"dot_general"``, ``"exp"``...) some kernel must execute;
    outside: primitives allowed in JAX ops around the kernels, beyond reshapes;
             ``"metadata"`` allows any op on integers only (group offsets...),
             ``"constants"`` any op that depends on no input (zeros, iota);
    grid:    every kernel's grid, exactly (a list: one grid per kernel, in the order
             they run; None: any);
    blocks:  operand position -> block shape (None for a squeezed dim), for every kernel;
    prefetch: at least one scalar-prefetch operand.
    """
    kernels: int | None = 1
    inside: frozenset = frozenset()
    outside: frozenset = frozenset({"constants"})
    grid: tuple | None = None
    blocks: dict | None = None
    prefetch: bool = False

    def __post_init__(self):
        object.__setattr__(self, "inside", frozenset(self.inside))
        object.__setattr__(self, "outside", frozenset(self.outside) | {"constants"})

    def where(self, **changes) -> "Structure":
        return dataclasses.replace(self, **changes)


def check(program, structure: Structure, sources: set[Path] | None = None) -> list[Finding]:
    """The first rule ``program`` breaks, as findings (empty: none broken).

    sources: the files kernels may come from (the chapter files in use); None
    skips that rule (the kit's own tests).
    """
    for rule in (_callbacks, _some_kernel, _own_kernels, _decoys, _orphans, _outside,
                 _inside, _count, _whole_array, _blocks, _grid, _prefetch,
                 _parallel_reduction):
        findings = rule(program, structure, sources)
        if findings:
            return findings
    return []


def _callbacks(program, structure, sources):
    if program.callbacks:
        return [Finding("callback", (
            "your function calls back into Python (" + ", ".join(sorted(set(program.callbacks)))
            + "): the result must be computed by JAX and your kernel, not by host code."))]
    return []


def _some_kernel(program, structure, sources):
    if not program.sites:
        return [Finding("no_kernel", (
            "your function computes its result without a Pallas kernel: the work of this "
            "puzzle belongs in a pl.pallas_call."))]
    return []


def _own_kernels(program, structure, sources):
    for site in program.sites:
        where = site.foreign or (
            site.call.source if sources is not None and site.call.source
            and Path(site.call.source).resolve() not in sources else "")
        if where:
            return [Finding("foreign_kernel", (
                f"the kernel {site.call.name}() is not yours: it comes from {_short(where)}. "
                "Write the kernel in your exercise file; the puzzle is to build it."),
                facts=[("kernel", f"{site.call.name}() from {_short(where)}")])]
    return []


def _decoys(program, structure, sources):
    if program.unused:
        site = program.unused[0]
        return [Finding("unused_kernel", (
            f"the output of your kernel {site.call.name}() is never used: the result "
            "comes from somewhere else. Return what the kernel computes."),
            facts=[("unused", f"every output of {site.call.name}()")])]
    return []


def _orphans(program, structure, sources):
    if program.orphans:
        which = ", ".join(str(k) for k in program.orphans)
        return [Finding("not_from_kernel", (
            "part of your result does not come from a kernel at all: every output must be "
            "computed by your pallas_call."), facts=[("outputs", f"not from a kernel: {which}")])]
    return []


def _outside(program, structure, sources):
    allowed = structure.outside
    bad = [op for op in program.ops
           if op.name not in FREE and op.name not in allowed
           and not ("metadata" in allowed and op.integer)
           and not op.constant]
    if not bad:
        return []
    bad.sort(key=lambda op: (_RANK.index(op.name) if op.name in _RANK else len(_RANK),
                             -op.nbytes))
    first = WORDS.get(bad[0].name, f"a {bad[0].name}")
    shown = " · ".join(dict.fromkeys(f"{op.name} {_size(op.nbytes)}" for op in bad[:4]))
    return [Finding("outside", (
        f"{_capital(first)} happens outside your kernel, in plain JAX: this puzzle wants "
        "that work inside the kernel, where the data already is."),
        facts=[("outside", shown + (f" and {len(bad) - 4} more" if len(bad) > 4 else ""))],
        detail=bad[0].name)]


def _inside(program, structure, sources):
    done = set()
    for site in program.sites:
        done |= _primitives(site.call.kernel)
    for name in sorted(structure.inside):
        if name not in done:
            return [Finding("missing_core", (
                f"{_capital(WORDS.get(name, name))} is not done inside any of your kernels: "
                "that is the work this puzzle is about."),
                facts=[("kernels", ", ".join(f"{s.call.name}()" for s in program.sites))],
                detail=name)]
    return []


def _count(program, structure, sources):
    if structure.kernels is not None and len(program.sites) != structure.kernels:
        names = ", ".join(f"{s.call.name}()" for s in program.sites)
        return [Finding("kernel_count", (
            f"this puzzle takes {structure.kernels} pallas_call"
            f"{'s' if structure.kernels != 1 else ''}; your function makes "
            f"{len(program.sites)}."), facts=[("kernels", names)])]
    return []


def _grids(program, structure):
    """(site, its grid, the expected grid) for every kernel the structure fixes."""
    if structure.grid is None:
        return []
    per_kernel = isinstance(structure.grid, list)
    return [(site, tuple(site.call.grid),
             tuple(structure.grid[n] if per_kernel else structure.grid))
            for n, site in enumerate(program.sites)
            if not per_kernel or n < len(structure.grid)]


def _whole_array(program, structure, sources):
    for site, grid, expected in _grids(program, structure):
        if _steps(grid) == 1 and _steps(expected) > 1:
            return [Finding("whole_array", (
                f"your kernel {site.call.name}() runs once, over the whole array: this "
                "puzzle is about the grid, one step per block."),
                facts=[("grid", f"expected {expected} · yours {grid or '()'}")])]
    return []


def _grid(program, structure, sources):
    for site, grid, expected in _grids(program, structure):
        if grid != expected:
            return [Finding("grid", (
                f"the grid of {site.call.name}() is {grid}, the puzzle's is {expected}: one "
                "grid step per block along each axis, in the order of the grid."),
                facts=[("grid", f"expected {expected} · yours {grid}")])]
    return []


def _blocks(program, structure, sources):
    if not structure.blocks:
        return []
    for site in program.sites:
        for position, shape in structure.blocks.items():
            blocks = site.call.blocks
            if position >= len(blocks):
                continue
            block = blocks[position]
            if tuple(block.block_shape) != tuple(shape):
                return [Finding("blocks_shape", (
                    f"{block.name} has blocks of shape {_shape(block.block_shape)}, the "
                    f"puzzle's are {_shape(shape)}: the BlockSpec's block shape decides "
                    "what one grid step sees."),
                    facts=[("blocks", f"{block.name}: expected {_shape(shape)} · yours "
                                      f"{_shape(block.block_shape)}")])]
    return []


def _prefetch(program, structure, sources):
    if structure.prefetch and not any(s.call.num_prefetch for s in program.sites):
        return [Finding("no_prefetch", (
            "no scalar prefetch: this puzzle's index maps read an index array that "
            "pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=...) puts in SMEM."))]
    return []


def _parallel_reduction(program, structure, sources):
    from . import walk

    for site in program.sites:
        call = site.call
        if call.num_prefetch or None in call.grid or len(call.semantics) != len(call.grid):
            continue  # index maps that read prefetched values: judged by the values
        steps = walk.grid_steps(call.grid)
        for block in call.blocks:
            if block.is_input:
                continue
            try:
                indices = walk.index_maps(block, steps, [])
            except walk.Uncountable:
                continue
            for axis, (size, kind) in enumerate(zip(call.grid, call.semantics)):
                if kind != "parallel" or size < 2:
                    continue
                others = np.delete(steps, axis, axis=1)
                keys = [tuple(k) for k in others]
                first = {}
                for key, index in zip(keys, map(tuple, indices)):
                    first.setdefault(key, index)
                if all(first[key] == tuple(index) for key, index in zip(keys, indices)):
                    return [Finding("parallel_reduction", (
                        f"grid axis {axis} of {call.name}() is marked \"parallel\", but "
                        f"{block.name} keeps the same block along it: that axis sums into "
                        "one block. A TPU with two cores splits \"parallel\" axes between "
                        "them, and each would write its own partial sum. Mark a reduction "
                        "axis \"arbitrary\" (and put it last)."),
                        facts=[("semantics", f"{call.name}(): {call.semantics}, grid "
                                             f"{call.grid}")])]
    return []


# ----------------------------------------------------------------- pieces ---

def _primitives(jaxpr) -> set[str]:
    from . import jaxcompat

    found = set()
    for eqn in jaxpr.eqns:
        found.add(eqn.primitive.name)
        for inner, _ in jaxcompat.sub_jaxprs(eqn):
            found |= _primitives(inner)
    return found


def _steps(grid) -> int:
    steps = 1
    for g in grid:
        steps *= g if isinstance(g, int) else 2
    return steps


def _shape(shape) -> str:
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + \
        ("," if len(shape) == 1 else "") + ")"


def _size(nbytes: int) -> str:
    return f"{nbytes / 1024:.3g} KiB" if nbytes >= 1024 else f"{nbytes} B"


def _short(path: str) -> str:
    for marker in ("jax/experimental/", "site-packages/"):
        if marker in path:
            return path[path.index(marker):]
    return Path(path).name


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
