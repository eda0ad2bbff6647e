"""What a puzzle's lesson requires of the learner's program, checked from its trace.

A test declares it::

    TILED = Structure(inside={"add"})                        # the addition in the kernel
    run(basics.add_one_tiled, x, bm=8, structure=TILED.where(grid=(4,), blocks={"x": (8, 128)}))

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
                   sum): always checked, it is wrong in every puzzle;
  precision        state carried from step to step (an accumulator, a running
                   max or sum: a buffer read, updated by arithmetic and written
                   back, or a loop carry) kept in a float narrower than 32 bits:
                   always checked, from the traced dtypes;
  rounded_state    such state kept in float32 whose update goes through values
                   rounded to a narrower float (arithmetic in bfloat16, a cast down
                   and back up): always checked, from what the values go through.

Nothing here runs JAX: it reads a ``program.Program``.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from .frozen import np

from . import jaxcompat
from .diagnose import Finding, _source_line

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
    "emit_pipeline": "a pipeline of pltpu.emit_pipeline (the copies it makes for its "
                     "BlockSpecs)",
    # Mosaic GPU (plgpu): TMA copies, barriers, the tensor core
    "copy_gmem_to_smem": "a TMA copy into SMEM (plgpu.copy_gmem_to_smem)",
    "copy_smem_to_gmem": "a TMA copy out of SMEM (plgpu.copy_smem_to_gmem)",
    "barrier_wait": "a wait on a barrier (plgpu.barrier_wait)",
    "barrier_arrive": "an arrival on a barrier (plgpu.barrier_arrive)",
    "wait_smem_to_gmem": "a wait for the copies out of SMEM (plgpu.wait_smem_to_gmem)",
    "commit_smem": "a plgpu.commit_smem()",
    "wgmma_ref": "a tensor-core matmul (plgpu.wgmma)",
    "axis_index": "an index of the grid or thread axis (lax.axis_index)",
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
             ``"emit_pipeline"``: copies made by ``pltpu.emit_pipeline``;
    outside: primitives allowed in JAX ops around the kernels, beyond reshapes;
             ``"metadata"`` allows any op on integers only (group offsets...),
             ``"constants"`` any op that depends on no input (zeros, iota);
    grid:    every kernel's grid, exactly (a list: one grid per kernel, in the order
             they run; None: any);
    blocks:  the measured function's argument name -> block shape (None for a squeezed
             dim), or a list of the shapes allowed, for every kernel operand that is that
             argument (found by identity: whatever its position among the operands,
             reshaped, padded or cast around the kernel, not computed by another kernel);
             "output": every kernel's BlockSpec'd outputs; "constants": the operands
             that depend on no argument (a table or mask the function built);
    prefetch: at least one scalar-prefetch operand;
    backend: every kernel's kind, "mosaic_tpu" (pl.pallas_call) or "mosaic_gpu"
             (plgpu.kernel); None: any;
    threads: Pallas threads (warpgroups) per block of every Mosaic GPU kernel;
    api:     how every kernel is written, "pl.pallas_call", "pl.kernel" (over a
             pltpu.TensorCoreMesh) or "plgpu.kernel"; None: any.
    """
    kernels: int | None = 1
    inside: frozenset = frozenset()
    outside: frozenset = frozenset({"constants"})
    grid: tuple | None = None
    blocks: dict | None = None
    prefetch: bool = False
    backend: str | None = None
    threads: int | None = None
    api: str | None = None

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
    for rule in (_callbacks, _some_kernel, _own_kernels, _decoys, _orphans, _backend, _api,
                 _gpu_program_id, _outside, _inside, _count, _whole_array, _blocks, _grid,
                 _prefetch, _threads, _parallel_reduction, _gpu_lowers, _wgmma_operands, _gpu_order,
                 _precision):
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
    bad.sort(key=lambda op: (op.integer,   # work on data first, index arithmetic after
                             _RANK.index(op.name) if op.name in _RANK else len(_RANK),
                             -op.nbytes))
    first = WORDS.get(bad[0].name, f"a {bad[0].name}")
    shown = " · ".join(dict.fromkeys(f"{op.name} {_size(op.nbytes)}" for op in bad[:4]))
    return [Finding("outside", (
        f"{_capital(first)} happens outside your kernel, in plain JAX: this puzzle wants "
        "that work inside the kernel, where the data already is."),
        facts=[("outside", shown + (f" and {len(bad) - 4} more" if len(bad) > 4 else ""))],
        detail=bad[0].name)]


_WAITS = frozenset({"barrier_wait", "dma_wait", "wait_smem_to_gmem", "barrier_arrive",
                    "copy_smem_to_gmem"})

# Primitives that compute what another does, for the lesson's sake: exp2(x * log2(e))
# is an exp (JAX's own flash kernels write it so); pl.program_id is the block's index.
SAME_WORK = {"exp2": "exp",
             # the block's index: pl.program_id as a TPU kernel (and the Mosaic GPU
             # docs' matmul) asks it, lax.axis_index(name) in a plgpu.kernel
             "program_id": "axis_index"}


def _inside(program, structure, sources):
    done = set()
    for site in program.sites:
        done |= _primitives(site.call.kernel)
    done |= {SAME_WORK[name] for name in done if name in SAME_WORK}
    # What waits for another op comes after it: a kernel with neither a copy nor its
    # wait is told about the copy.
    for name in sorted(structure.inside, key=lambda name: (name in _WAITS, name)):
        if name not in done:
            return [Finding("missing_core", (
                f"{_capital(WORDS.get(name, name))} is not done inside any of your kernels: "
                "that is the work this puzzle is about."),
                facts=[("kernels", ", ".join(f"{s.call.name}()" for s in program.sites))],
                detail=name)]
    return []


_BACKENDS = {"mosaic_gpu": "a Mosaic GPU kernel, plgpu.kernel(...)",
             "mosaic_tpu": "a TPU kernel, pl.pallas_call(...)"}


def _backend(program, structure, sources):
    for site in program.sites:
        if structure.backend is not None and site.call.backend != structure.backend:
            return [Finding("backend", (
                f"your kernel {site.call.name}() is {_BACKENDS.get(site.call.backend)}: this "
                f"puzzle's kernels are {_BACKENDS.get(structure.backend)}."),
                facts=[("kernel", f"{site.call.name}(): {site.call.backend}")])]
    return []


def _api(program, structure, sources):
    for site in program.sites:
        if structure.api is not None and site.call.api != structure.api:
            return [Finding("api", (
                f"your kernel {site.call.name}() is written with {site.call.api}(...): this "
                f"puzzle's lesson is {structure.api}(...), the API the current docs teach, "
                "so write it that way."),
                facts=[("kernel", f"{site.call.name}(): {site.call.api}")])]
    return []


def _threads(program, structure, sources):
    for site in program.sites:
        if structure.threads is not None and site.call.threads != structure.threads:
            return [Finding("threads", (
                f"your kernel {site.call.name}() runs {site.call.threads} Pallas thread"
                f"{'s' * (site.call.threads != 1)} (warpgroups) per block, the puzzle's "
                f"{structure.threads}: plgpu.kernel(..., num_threads={structure.threads}, "
                "thread_name=...)."),
                facts=[("threads", f"expected {structure.threads} · yours "
                                   f"{site.call.threads}")])]
    return []


def _gpu_program_id(program, structure, sources):
    """pl.program_id in a Mosaic GPU kernel with a grid: right on a GPU (the Mosaic GPU
    docs' matmul asks it), but GPU interpret mode answers 0 in every block, so what runs
    here is another kernel. Never called wrong for it: it cannot be verified here."""
    for site in program.sites:
        if site.call.backend == "mosaic_gpu" and _steps(site.call.grid) > 1 \
                and "program_id" in _primitives(site.call.kernel):
            raise jaxcompat.CannotVerify(
                f"{jaxcompat.UNFAITHFUL}pl.program_id in {site.call.name}(), a plgpu.kernel "
                "with a grid",
                "GPU interpret mode answers pl.program_id with 0 in every block; to be "
                "checked here, name the grid axes (grid_names=...) and ask "
                "lax.axis_index(name), which means the same on a Hopper")
    return []


def _gpu_lowers(program, structure, sources):
    """A Mosaic GPU kernel with an operation that Mosaic GPU cannot lower (a jnp.dot: no
    lowering rule, the tensor core is plgpu.wgmma): GPU interpret mode runs it, a Hopper
    would not compile it."""
    for site in program.sites:
        if site.call.backend != "mosaic_gpu":
            continue
        for eqn in jaxcompat.gpu_unlowered(site.call.kernel):
            name = eqn.primitive.name
            what = WORDS.get(name, name)
            return [Finding("gpu_lowering", (
                f"{what} in your kernel has no Mosaic GPU lowering: GPU interpret mode runs "
                "it here, but on a Hopper the kernel does not compile."
                + (" The tensor core is reached through plgpu.wgmma(acc_ref, a, b), its "
                   "operands in SMEM and its accumulator a plgpu.ACC."
                   if name == "dot_general" else "")),
                facts=[("op", _line(eqn, sources))], detail=name)]
    return []


def _wgmma_operands(program, structure, sources):
    """Every plgpu.wgmma: SMEM operands laid out for the tensor core (tiled (8, swizzle
    in elements) and swizzled), and a float32 accumulator. GPU interpret mode computes
    the product either way; a Hopper needs both."""
    from .program import _user_line

    for site in program.sites:
        if site.call.backend != "mosaic_gpu":
            continue
        for found in jaxcompat.wgmma_operands(site.call.kernel):
            eqn = found["eqn"]
            where = _user_line(eqn, sources)
            facts = ([("wgmma", f"{Path(where[0]).parent.name}/{Path(where[0]).name}:"
                                f"{where[1]}   {_source_line(where).strip()}")] if where else [])
            acc = _dtype(eqn.invars[0])
            if acc is not None and np.dtype(acc) != np.float32:
                return [Finding("precision", (
                    f"the wgmma accumulates in {np.dtype(acc).name}: a sum over K of "
                    f"products rounded to {np.dtype(acc).name} at every step loses its low "
                    "bits. Give it a float32 accumulator, plgpu.ACC(shape, jnp.float32), and "
                    "cast once when you store the result."), facts=facts)]
            for operand in ("a", "b"):
                layout = found.get(operand)
                if layout is None:
                    continue
                itemsize = np.dtype(_dtype(eqn.invars[1 if operand == "a" else 2])).itemsize
                swizzle, tiling = layout["swizzle"], layout["tiling"]
                if swizzle is None or tiling is None or tiling != (8, swizzle // itemsize):
                    shown = (f"swizzle {swizzle} bytes, tiling {tiling}" if swizzle or tiling
                             else "no transforms")
                    return [Finding("wgmma_layout", (
                        f"the wgmma's {operand.upper()} operand is in SMEM without the layout "
                        "the tensor core reads: allocate it with transforms=("
                        "plgpu.TilingTransform((8, swizzle // itemsize)), "
                        "plgpu.SwizzleTransform(swizzle)), the swizzle (128, 64 or 32 bytes) "
                        "dividing a row of the tile in bytes. GPU interpret mode multiplies "
                        "anyway; a Hopper would not compile it (or read garbage)."),
                        facts=facts + [(operand.upper(), shown)])]
    return []


def _gpu_order(program, structure, sources):
    """An asynchronous read (a wgmma, a TMA copy out) of SMEM not ordered after what it
    reads, in a Mosaic GPU kernel's program order (ordering.py): GPU interpret mode does
    not see the tensor core's reads. Then, from the kernel's loops and barriers run on
    their integers (gpu_walk.py), before the kernel runs: a deadlock (the interpreter
    would wait until the time bound), and a TMA copy refilling a slot a wgmma may still
    read."""
    from . import gpu_walk, ordering
    from .diagnose import _GPU_RACE_SAYS

    for site in program.sites:
        for problem in ordering.problems(site.call):
            labels = (("reads", "copy") if problem.kind == "race_barrier_wait"
                      else ("async", "store"))
            facts = [(label, _line(eqn, sources))
                     for label, eqn in zip(labels, (problem.eqn, problem.other))]
            return [Finding(problem.kind, _GPU_RACE_SAYS[problem.kind], facts=facts)]
    for site in program.sites:
        found = gpu_walk.walk(site.call)
        if found is not None and found.stuck:
            facts = []
            for stuck in found.stuck:
                steps = "".join(f", loop step {step}" for step in stuck.iterations)
                barrier = f"[{', '.join(map(str, stuck.index))}]" if stuck.index else ""
                facts += [("waits", _line(stuck.wait, sources)),
                          ("", f"warpgroup {stuck.thread}{steps}: waits for completion "
                               f"{stuck.needs} of barrier{barrier}, which has had "
                               f"{stuck.completions}")]
            return [Finding("barrier_deadlock", _GPU_RACE_SAYS["barrier_deadlock"],
                            facts=facts)]
        if found is not None and found.refills:
            refill = found.refills[0]
            wait = refill.wait
            waited = ("none between the wgmma and the copy" if wait is None else
                      f"{_line(wait, sources)}   (lets "
                      f"{jaxcompat.wgmma_left_running(wait)} run on)")
            return [Finding("race_wgmma_refill", _GPU_RACE_SAYS["race_wgmma_refill"],
                            facts=[("wgmma", _line(refill.wgmma, sources)),
                                   ("wait", waited)])]
    return []


def _line(eqn, sources) -> str:
    from .program import _user_line

    where = _user_line(eqn, sources)
    if where is None:
        return "(inside JAX: the line that called it is not known)"
    return (f"{Path(where[0]).parent.name}/{Path(where[0]).name}:{where[1]}   "
            f"{_source_line(where).strip()}")


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


def same_grid(yours, expected) -> bool:
    """Whether two grids take the same steps in the same order: equal up to axes of size
    1 (JAX's paged attention keeps one for megacore; ``jax.vmap`` over a batch of 1 adds
    one), whose program id is always 0."""
    return tuple(g for g in yours if g != 1) == tuple(g for g in expected if g != 1)


def reordered_grid(call, expected) -> bool:
    """Whether a kernel's grid is the puzzle's with its axes in another order and the
    same work: every output block's visits still come one after another (a reduction
    axis still runs innermost for each output block), as its index maps show on every
    grid step. A parallel axis moved (the batch innermost, the columns before the rows)
    computes the same blocks; a reduction moved outwards revisits output blocks and is
    not this. Index maps that read scalar prefetch are not judged here (False)."""
    from . import walk

    grid = tuple(call.grid)
    if same_grid(grid, expected) or None in grid or call.num_prefetch or \
            sorted(g for g in grid if g != 1) != sorted(g for g in expected if g != 1):
        return False
    steps = walk.grid_steps(grid)
    for block in call.blocks[call.num_inputs:]:
        try:
            visits = walk.index_maps(block, steps, [])
        except (walk.Uncountable, Exception):   # an index map the walk cannot evaluate
            return False
        runs = [tuple(v) for n, v in enumerate(visits) if n == 0 or
                tuple(v) != tuple(visits[n - 1])]
        if len(runs) != len(set(runs)):
            return False
    # The same traffic: run in the puzzle's order (your axes permuted back), no operand
    # is fetched fewer times than in yours. An input fetched again for each block of
    # another axis moved inwards (a conv's window per channel block) is not the lesson.
    yours = _fetches(call, steps)
    return any(all(a <= b for a, b in zip(yours, _fetches(call, _permuted(steps, order))))
               for order in _orders(grid, tuple(expected)))


def _orders(grid, expected):
    """The permutations taking the puzzle's axes to yours (axes of one size may swap)."""
    import itertools

    mine = [d for d, g in enumerate(grid) if g != 1]
    theirs = [g for g in expected if g != 1]
    for order in itertools.permutations(mine):
        if [grid[d] for d in order] == theirs:
            yield order


def _permuted(steps, order):
    """Your grid's points, visited in the puzzle's order: ``order[k]`` is your axis that
    is the puzzle's k-th."""
    keys = [steps[:, d] for d in reversed(order)]    # np.lexsort: last key is primary
    return steps[np.lexsort(keys)] if keys else steps


def _fetches(call, steps) -> tuple:
    """Per operand, how many times its block changes from one step to the next."""
    from . import walk

    counts = []
    for block in call.blocks:
        try:
            visits = [tuple(v) for v in walk.index_maps(block, steps, [])]
        except Exception:
            return (float("inf"),)
        counts.append(sum(1 for n, v in enumerate(visits) if n == 0 or v != visits[n - 1]))
    return tuple(counts)


def _grid(program, structure, sources):
    for site, grid, expected in _grids(program, structure):
        if not same_grid(grid, expected) and not reordered_grid(site.call, expected):
            # What the kit has shown, for a puzzle's words on it: an axis whose length is
            # a number traced at run time ("grid:traced", shown as None: megablox's
            # num_tiles), else the same axes in another order ("grid:order"), else the
            # first axis that differs ("grid:axis2").
            axis = next((d for d, (a, b) in enumerate(zip(grid, expected)) if a != b), None) \
                if len(grid) == len(expected) else None
            reordered = sorted(grid, key=str) == sorted(expected, key=str)
            detail = "traced" if None in grid else "order" if reordered else \
                "" if axis is None else f"axis{axis}"
            return [Finding("grid", (
                f"the grid of {site.call.name}() is {grid}, the puzzle's is {expected}: one "
                "grid step per block along each axis, in the order of the grid."),
                facts=[("grid", f"expected {expected} · yours {grid}")], detail=detail)]
    return []


def _blocks(program, structure, sources):
    if not structure.blocks:
        return []
    for label, shapes in structure.blocks.items():
        findings = blocks_of(program, label, shapes)
        if findings:
            return findings
    return []


def blocks_of(program, label: str, shapes, *, array_name: str | None = None,
              sites=None) -> list[Finding]:
    """Findings when the kernel operands that are argument ``label`` of the traced
    function (``"output"``: the kernels' BlockSpec'd outputs) do not all move in blocks
    of ``shapes`` (one shape, or a list of the shapes allowed), or when none reaches a
    kernel through a BlockSpec. ``array_name``: what the words call it (the label).
    ``sites``: the kernels to look at (default every one)."""
    shapes = [tuple(shape) for shape in (shapes if isinstance(shapes, list) else [shapes])]
    called = array_name or label
    found = operands_of(program, label, sites)
    if not found and label not in ("output", "constants"):
        return [Finding("blocks_shape", (
            f"{called} reaches no kernel through a BlockSpec: give it one, with blocks of "
            f"shape {_shape(shapes[0])}, so that each grid step sees its block."),
            facts=[("blocks", f"{called}: expected {_shape(shapes[0])} · yours none")])]
    for block in found:
        if _squeezed(block.block_shape) not in {_squeezed(shape) for shape in shapes}:
            wanted = " or ".join(_shape(shape) for shape in shapes)
            return [Finding("blocks_shape", (
                f"{block.name} has blocks of shape {_shape(block.block_shape)}, the "
                f"puzzle's are {wanted}: the BlockSpec's block shape decides what one "
                "grid step sees."),
                facts=[("blocks", f"{block.name}: expected {wanted} · yours "
                                  f"{_shape(block.block_shape)}")])]
    return []


def _squeezed(shape) -> tuple:
    """A block shape as what one grid step sees: a squeezed dim (None, pl.Squeezed), a
    dim of size 1 and no dim at all are the same block (JAX's flash kernel writes
    (1, 1, block_q, H) where the lesson writes (None, None, block_q, H); ``jax.vmap``
    adds a squeezed dim)."""
    return tuple(d for d in shape if d not in (None, 1))


def operands_of(program, label: str, sites=None) -> list:
    """The BlockSpec'd operands (``jaxcompat.Block``) of the kernels that are argument
    ``label`` of the traced function, by identity (``Site.direct``); ``"output"``: every
    kernel's BlockSpec'd outputs; ``"constants"``: those that depend on no argument."""
    sites = program.sites if sites is None else sites
    if label == "output":
        return [block for site in sites for block in site.call.blocks if not block.is_input]
    if label == "constants":
        return [site.call.blocks[n - site.call.num_prefetch] for site in sites
                for n, inputs in enumerate(site.inputs)
                if n >= site.call.num_prefetch and not inputs]
    if label not in program.arguments:
        raise KeyError(f"Structure.blocks names {label!r}, which is not an argument of the "
                       f"measured function ({', '.join(program.arguments) or 'none known'})")
    mine = program.arguments[label]
    return [site.call.blocks[n - site.call.num_prefetch] for site in sites
            for n, direct in enumerate(site.direct)
            if n >= site.call.num_prefetch and direct & mine
            and n - site.call.num_prefetch < len(site.call.blocks)]


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
                    last = axis == len(call.grid) - 1
                    return [Finding("parallel_reduction", (
                        f"grid axis {axis} of {call.name}() is marked \"parallel\", but "
                        f"{block.name} keeps the same block along it, so every step along "
                        "that axis writes one block. Either the axis is a reduction: a TPU "
                        "with two cores splits \"parallel\" axes between them and each "
                        "would write its own partial sum, so mark it \"arbitrary\""
                        + ("" if last else " (and put it last)") + "; or each step should "
                        f"write a block of its own: then {block.name}'s index map must "
                        "move along the axis."),
                        facts=[("semantics", f"{call.name}(): {call.semantics}, grid "
                                             f"{call.grid}")])]
    return []


def _in_kernel(eqn, call) -> tuple[str, int] | None:
    """The line of the kernel function's body that made ``eqn`` (the innermost of its
    frames inside that function), or None where none is (an equation of a custom_vjp's
    backward carries the forward call's frames, which would name the wrong line)."""
    import ast

    if eqn is None or not call.source or not call.line:
        return None
    try:
        tree = ast.parse(Path(call.source).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    ends = [node.end_lineno for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.Lambda)) and node.lineno == call.line]
    if not ends:
        return None
    source = Path(call.source).resolve()
    for path, line in jaxcompat.frames(eqn):
        if call.line <= line <= max(ends) and Path(path).resolve() == source:
            return path, line
    return None


def _precision(program, structure, sources):
    for site in program.sites:
        for what, dtype, eqn in carried_state(site.call):
            name = np.dtype(dtype).name
            if name.startswith(("float", "bfloat")) and np.dtype(dtype).itemsize < 4:
                where = _in_kernel(eqn, site.call)
                facts = [("state", f"{what}: {np.dtype(dtype).name}")]
                if where:
                    facts.append(("stored", f"{Path(where[0]).parent.name}/"
                                            f"{Path(where[0]).name}:{where[1]}   "
                                            f"{_source_line(where).strip()}"))
                return [Finding("precision", (
                    f"{what} is {np.dtype(dtype).name} and carried from one step to the "
                    "next (read, updated and written back): an accumulator or a softmax "
                    f"statistic kept in {np.dtype(dtype).name} loses its low bits at every "
                    "update, and the error grows with the number of steps. Keep it in "
                    "float32 (a jnp.float32 scratch, preferred_element_type=jnp.float32 "
                    "for dots) and cast once, when the result is stored."), facts=facts)]
    for site in program.sites:
        for what, dtype, eqn in rounded_state(site.call):
            narrow = np.dtype(_dtype(eqn.outvars[0])).name
            wide = np.dtype(dtype).name
            where = _in_kernel(eqn, site.call)
            facts = [("state", f"{what}: {wide}, updated through {narrow} values")]
            if where:
                facts.append(("rounded", f"{Path(where[0]).parent.name}/"
                                         f"{Path(where[0]).name}:{where[1]}   "
                                         f"{_source_line(where).strip()}"))
            cast = eqn.primitive.name == "convert_element_type"
            done = (f"a value is cast down to {narrow} with .astype" if cast else
                    f"{WORDS.get(eqn.primitive.name, eqn.primitive.name)} is computed in "
                    f"{narrow}")
            if eqn.primitive.name == "dot_general":
                done += (" (its result's dtype: on a TPU it would not even compile, its MXU "
                         "adds up a matmul in 32 bits; preferred_element_type=jnp.float32)")
            return [Finding("rounded_state", (
                f"{what} is {wide}, but its update is computed in {narrow} on the way: "
                f"{done}" + (" (the line above)" if where else "") + ", so what reaches "
                f"{what} at every step carries {narrow}'s rounding, however wide the "
                "buffer. Do the update's arithmetic in float32: cast what you read to "
                "float32 first (x_ref[...].astype(jnp.float32)). Narrow operands of a dot "
                "with preferred_element_type=jnp.float32 are fine, and so is one cast, "
                "when the result is stored."), facts=facts)]
    return []


# What a value passes through unchanged (no rounding of its own): a buffer stored back
# through these only (a masked store, a cast) is not an accumulator.
_UNCHANGED = frozenset({"select_n", "convert_element_type", "reshape", "broadcast_in_dim",
                        "squeeze", "expand_dims", "slice", "dynamic_slice", "concatenate",
                        "transpose", "copy", "copy_p", "pvary", "rev", "pad",
                        "dynamic_update_slice", "bitcast_convert_type", "reshard",
                        "sharding_constraint", "optimization_barrier"})


def carried_state(call) -> list[tuple[str, object, object]]:
    """What a kernel carries from step to step through arithmetic: (what, its dtype, the
    equation that writes it back) for every ref the kernel reads, updates by arithmetic
    and stores again, and every loop carry updated from itself."""
    return [(what, dtype, eqn) for what, dtype, eqn, _, _ in _carried(call)]


def rounded_state(call) -> list[tuple[str, object, object]]:
    """The states a kernel carries whose update goes through values rounded to a float
    narrower than float32 on the way (arithmetic in bfloat16, a cast down and back up),
    though the state itself is wider: (what, its dtype, the equation that rounds: the
    first narrow arithmetic, else the first cast down)."""
    return [(what, dtype, rounds[0]) for what, dtype, _, _, rounds in _carried(call)
            if rounds and (_float_width(dtype) or 0) >= 4]


def state_sources(call) -> list[tuple[str, object, frozenset]]:
    """What flows into each state a kernel carries: (what, its dtype, the positions among
    the kernel's refs, prefetch first, of those whose values its update reads), so that a
    test can tell a running sum of products from one that multiplies in a scale at
    every step."""
    return [(what, dtype, frozenset(root[1] for root in fed if root[0] == "ref"))
            for what, dtype, _, fed, _ in _carried(call)]


def _carried(call) -> list[tuple[str, object, object, frozenset, list]]:
    kernel = call.kernel
    names = list(getattr(getattr(kernel, "debug_info", None), "arg_names", None) or ())
    roots = {var: ("ref", n) for n, var in enumerate(kernel.invars)}
    found: dict = {}
    _flow(kernel, roots, {}, found)
    # A block of a Mosaic GPU grid runs its body once (blocks run in parallel, scratch
    # does not outlive them), as does a kernel of one grid step (pl.kernel has none):
    # only what a loop updates is carried from step to step.
    once = getattr(call, "backend", "") == "mosaic_gpu" or (
        None not in call.grid and math.prod(call.grid) == 1)
    in_loops = _in_loops(kernel) if once else None
    order = {id(e): n for n, e in enumerate(jaxcompat.equations(kernel))}
    state = []
    for root, (eqn, dtype, fed) in found.items():
        if root[0] == "narrow" or in_loops is not None and id(eqn) not in in_loops:
            continue
        if root[0] == "ref":
            n = root[1]
            what = f"{names[n]}" if n < len(names) and names[n] else f"operand {n}"
        elif root[0] == "scoped":
            what = "a pl.run_scoped buffer"
        else:
            what = "a loop carry (lax.fori_loop)"
        # Arithmetic first (what rounds the update), then casts down, in program order.
        rounds = sorted((found[mark][0] for mark in fed if mark[0] == "narrow"),
                        key=lambda e: (e.primitive.name == "convert_element_type",
                                       order.get(id(e), len(order))))
        state.append((what, dtype, eqn, frozenset(fed), rounds))
    return state


def _in_loops(jaxpr, inside: bool = False) -> set[int]:
    """ids of the equations of ``jaxpr`` that run inside a loop (while, scan)."""
    found = set()
    for eqn in jaxpr.eqns:
        if inside:
            found.add(id(eqn))
        loop = isinstance(jaxcompat.control(eqn), jaxcompat.Loop)
        for inner, _ in jaxcompat.parts(eqn):
            found |= _in_loops(inner, inside or loop)
    return found


def _flow(jaxpr, refs: dict, taint: dict, found: dict, consts=()) -> list[dict]:
    """Follows which buffers each value of ``jaxpr`` was read from (1: copied, 2: through
    arithmetic); records in ``found`` a buffer stored back from itself through arithmetic.
    ``refs``: ref var -> its buffer; ``taint``: value var -> {buffer: 1 or 2}."""
    def of(v):
        return {} if jaxcompat.is_literal(v) else taint.get(v, {})

    def merge(parts, bump=False):
        out: dict = {}
        for part in parts:
            for root, level in part.items():
                out[root] = max(out.get(root, 0), 2 if bump else level)
        return out

    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        ins = list(eqn.invars)
        outs = [{} for _ in eqn.outvars]
        if name == "get" and ins[0] in refs:
            outs = [{refs[ins[0]]: 1}]
        elif name in ("swap", "addupdate") and ins[0] in refs:
            root = refs[ins[0]]
            if name == "addupdate" or of(ins[1]).get(root) == 2:
                found.setdefault(root, (eqn, _dtype(ins[0]), set()))[2].update(of(ins[1]))
            outs = [{root: 1} for _ in eqn.outvars]
        elif isinstance(view := jaxcompat.control(eqn), jaxcompat.Branches):
            _, operands = view.split(ins)
            results = []
            for inner, _ in view.programs:
                results.append(_flow(inner, _bind_refs(inner.invars, operands, refs),
                                     _bind_taint(inner.invars, operands, of), found))
            outs = [merge(r[k] for r in results) for k in range(len(eqn.outvars))]
        elif isinstance(view, jaxcompat.Scoped):
            inner, _ = view.body
            scoped = {var: ("scoped", id(var)) for var in inner.invars}
            inner_refs = {**_bind_refs(inner.constvars, ins, refs), **scoped}
            _flow(inner, inner_refs, _bind_taint(inner.constvars, ins, of), found)
        elif isinstance(view, jaxcompat.Loop):
            outs = _loop(view, eqn, refs, of, found)
        elif isinstance(view, jaxcompat.Inline):
            inner, _ = view.body
            outs = _flow(inner, _bind_refs(inner.invars, ins, refs),
                         _bind_taint(inner.invars, ins, of), found)
        elif name not in ("dma_start", "dma_wait"):
            merged = merge((of(v) for v in ins), bump=name not in _UNCHANGED)
            outs = [_rounding(eqn, merged, ins, found) for _ in eqn.outvars]
        for var, value in zip(eqn.outvars, outs):
            taint[var] = value
    return [{} if jaxcompat.is_literal(v) else taint.get(v, {}) for v in jaxpr.outvars]


def _float_width(dtype) -> int | None:
    """Bytes of a float dtype (bfloat16: 2), None for anything else."""
    if dtype is None:
        return None
    try:
        dtype = np.dtype(dtype)
    except TypeError:   # a semaphore's or a barrier's dtype
        return None
    return dtype.itemsize if "float" in dtype.name else None


def _rounding(eqn, merged: dict, ins, found: dict) -> dict:
    """What an equation's result depends on, with the values it rounds to a narrow float
    marked (a root ("narrow", id(eqn)), recorded in ``found``): arithmetic whose result
    is a float narrower than float32 (an add, an exp, a sum in bfloat16), or a cast of a
    wider float down to one. A dot whose result is float32 takes narrow operands (the
    MXU's bf16 inputs, preferred_element_type=jnp.float32) and rounds nothing: the marks
    stop there, as they do at a result that is not a float (a comparison, an index)."""
    width = _float_width(_dtype(eqn.outvars[0])) if eqn.outvars else None
    name = eqn.primitive.name
    if width is None or (width >= 4 and name == "dot_general"):
        return {root: level for root, level in merged.items() if root[0] != "narrow"}
    if width >= 4:
        return merged
    if name == "convert_element_type":
        source = None if _literal(ins[0]) else _float_width(_dtype(ins[0]))
        rounds = source is not None and source > width
    else:
        rounds = name not in _UNCHANGED
    if not rounds:
        return merged
    mark = ("narrow", id(eqn))
    found.setdefault(mark, (eqn, _dtype(eqn.outvars[0]), set()))
    return {**merged, mark: 2}


def _loop(view, eqn, refs, of, found) -> list[dict]:
    """A while or scan: refs pass in as constants; each carry is followed around the body
    twice (what flows in once flows in for good), and a floating carry updated from
    itself through arithmetic is recorded."""
    _, consts, carry, rest = view.split(list(eqn.invars))
    body, _ = view.body
    marks = [("carry", id(eqn), k) for k in range(len(carry))]
    carried = [{**of(v), mark: 1} for v, mark in zip(carry, marks)]
    outs: list[dict] = []
    for _ in range(2):
        operands = [*consts, *carry, *rest]
        taints = [of(v) for v in consts] + carried + [of(v) for v in rest]
        inner_taint = {var: t for var, t in zip(body.invars, taints)}
        outs = _flow(body, _bind_refs(body.invars, operands, refs), inner_taint, found)
        carried = [{**c, **o} for c, o in zip(carried, outs[:len(carry)])]
    for k, (mark, out) in enumerate(zip(marks, outs[:len(carry)])):
        if out.get(mark) == 2:
            found.setdefault(mark, (_carry_store(body, k, len(consts)), _dtype(carry[k]),
                                    set()))[2].update(out)
    return [{r: lvl for r, lvl in o.items() if r[0] != "carry"} for o in outs] + \
        [{} for _ in range(len(eqn.outvars) - len(outs))]


def _carry_store(body, k: int, num_consts: int):
    """The equation of a loop body that computes carry ``k`` (for the learner's line)."""
    out = body.outvars[k] if k < len(body.outvars) else None
    return next((e for e in body.eqns if out in e.outvars), None)


def _bind_refs(inner_vars, outer_vars, refs) -> dict:
    return {inner: refs[outer] for inner, outer in zip(inner_vars, outer_vars)
            if not _literal(outer) and outer in refs}


def _bind_taint(inner_vars, outer_vars, of) -> dict:
    return {inner: of(outer) for inner, outer in zip(inner_vars, outer_vars)}


def _literal(v) -> bool:
    return jaxcompat.is_literal(v)


def _dtype(var):
    aval = getattr(var, "aval", None)
    return getattr(aval, "dtype", None) or getattr(getattr(aval, "inner_aval", None),
                                                   "dtype", None)


# ----------------------------------------------------------------- pieces ---

def _primitives(jaxpr) -> set[str]:
    found = set()
    for eqn in jaxcompat.equations(jaxpr):
        found.add(eqn.primitive.name)
        if eqn.primitive.name in ("dma_start", "copy_gmem_to_smem") \
                and jaxcompat.from_emit_pipeline(eqn):
            found.add("emit_pipeline")
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
