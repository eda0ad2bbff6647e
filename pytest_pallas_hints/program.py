"""One trace of a learner's function, read as a program.

``trace`` runs the learner's Python once and keeps the jaxpr. Everything the
kit checks comes from that jaxpr and from one run of it:

* what the program is made of (``Program``): every ``pallas_call`` (its grid,
  blocks, the file its kernel comes from), every JAX op around the kernels
  that the result depends on, kernel outputs that nothing uses, outputs that
  no kernel produced;
* ``execute``: the value, from one compiled run that also hands back the
  scalar-prefetch operands each kernel got (what the byte and work accounting
  need), so no second run, in another mode, is ever made;
* ``lower_for_tpu``: the same program lowered by the real TPU compiler front end.

The learner's code cannot tell these apart: it ran once, while being traced.
"""
from __future__ import annotations

import dataclasses
import functools

from .frozen import np

from . import jaxcompat


@dataclasses.dataclass
class Site:
    """One pallas_call of the program."""
    index: int
    call: jaxcompat.KernelCall
    repeated: bool        # inside a loop or branch of the program: runs 0 or many times
    foreign: str = ""     # a JAX library file the kernel's code comes from, if any
    inputs: tuple = ()    # per operand (prefetch ones first): the positions, among the
    #                       program's flat inputs, of the inputs its value comes from
    direct: tuple = ()    # per operand, those it comes from without passing through a
    #                       kernel: the argument itself, reshaped, padded or cast around it
    mesh: tuple = ()      # ((axis name, size), ...) of the shard_map it runs in: it runs
    #                       once on every device of that mesh (a simulated chip each)

    @property
    def devices(self) -> int:
        """How many devices run this kernel (each on its own shard)."""
        return int(np.prod([size for _, size in self.mesh], dtype=np.int64)) if self.mesh else 1


@dataclasses.dataclass
class Op:
    """A JAX op outside every kernel that the program's result depends on."""
    name: str
    nbytes: int
    integer: bool         # computed from integer inputs only, none from float data
    #                       (index metadata, whatever ops it takes: a histogram of the
    #                       group sizes; floats bitcast to integers are still data)
    constant: bool        # depends on no input (zeros, iota...)


@dataclasses.dataclass
class Program:
    closed: object                     # the ClosedJaxpr
    out_tree: object
    sites: list[Site]
    ops: list[Op]                      # live ops outside kernels, in program order
    unused: list[Site]                 # kernels none of whose outputs the result uses
    orphans: list[int]                 # program outputs that depend on no kernel
    callbacks: list[str]               # host callbacks anywhere in the program
    _by_eqn: dict = dataclasses.field(default_factory=dict, repr=False)
    arguments: dict = dataclasses.field(default_factory=dict)   # the traced function's
    #                                    parameter name -> positions of its flat inputs

    def describe(self) -> str:
        """Text for everything in the program, parameters included (a cache key)."""
        return "\n".join(jaxcompat.describe(self.closed))


_CALLBACKS = {"pure_callback", "io_callback", "callback"}


def trace(fn, args: tuple, static: dict, reading=None) -> Program:
    """Runs ``fn(*args, **static)``'s Python once, as a trace, and reads the program
    (inside the context ``reading()``, where given: the kit's own step)."""
    import contextlib

    import jax

    try:
        with jaxcompat.traced_for_tpu():  # TPU kernels, whatever runs them here
            closed, shapes = jax.make_jaxpr(functools.partial(fn, **static),
                                            return_shape=True)(*args)
    except Exception as error:
        raise learners(error)
    with (reading or contextlib.nullcontext)():
        program = read(closed, jax.tree_util.tree_structure(shapes))
        program.arguments = _arguments(fn, args)
        return program


def _arguments(fn, args: tuple) -> dict[str, frozenset[int]]:
    """Parameter name -> the positions of its leaves among the program's flat inputs,
    for the positional ``args`` ``fn`` was traced with (empty where its signature cannot
    be read)."""
    import inspect

    import jax

    try:
        bound = inspect.signature(fn).bind_partial(*args)
    except (TypeError, ValueError):
        return {}
    names, start = {}, 0
    for name, value in bound.arguments.items():
        count = len(jax.tree_util.tree_leaves(value))
        names[name] = frozenset(range(start, start + count))
        start += count
    return names


def read(closed, out_tree) -> Program:
    """What a traced program is made of (see ``Program``)."""
    graph = _Graph()
    sites: list[Site] = []
    by_eqn: dict[int, int] = {}
    callbacks: list[str] = []
    operand_nodes: list = []

    def walk(jaxpr, inputs: list, repeated: bool, mesh: tuple = ()) -> list:
        env = dict(zip(jaxpr.invars, inputs))
        for var in jaxpr.constvars:
            env[var] = graph.add("const", [])

        def node(v):
            return None if jaxcompat.is_literal(v) else env.get(v)

        for eqn in jaxpr.eqns:
            ins = [n for n in map(node, eqn.invars) if n is not None]
            name = eqn.primitive.name
            if name in _CALLBACKS:
                callbacks.append(name)
            if jaxcompat.is_kernel(eqn):
                call = jaxcompat.kernel_call(eqn)
                site = Site(len(sites), call, repeated, _foreign(call.kernel), mesh=mesh)
                bounds = len(site.call.dynamic_grid)   # dynamic grid sizes come first
                operand_nodes.append((site, [node(v) for v in eqn.invars[bounds:]]))
                sites.append(site)
                by_eqn[id(eqn)] = site.index
                kernel = graph.add("kernel", ins, site=site)
                outs = [graph.add("kernel_out", [kernel], site=site, position=k)
                        for k in range(len(eqn.outvars))]
                callbacks.extend(_callbacks_in(call.kernel))
            elif isinstance(view := jaxcompat.control(eqn), jaxcompat.Inline):
                inner, _ = view.body
                outs = walk(inner, [graph.add("const", []) if n is None else n
                                    for n in map(node, eqn.invars)], repeated, mesh)
            elif jaxcompat.shard_map_body(eqn) is not None:   # once per device, each on
                inner, axes = jaxcompat.shard_map_body(eqn)   # its own shard
                outs = walk(inner, [graph.add("const", []) if n is None else n
                                    for n in map(node, eqn.invars)], repeated, mesh + axes)
            else:
                inner_outs = []
                for inner, _ in jaxcompat.parts(eqn):  # cond, while, scan...
                    merged = graph.add("op", ins, name=name, nbytes=0)
                    inner_outs += walk(inner, [merged] * len(inner.invars), True)
                glue = jaxcompat.relayout_only(eqn)   # x[None]: a reshape, whatever op
                outs = [graph.add("op", ins + [n for n in inner_outs if n is not None],
                                  name="reshape" if glue else name, nbytes=_nbytes(eqn))
                        for _ in eqn.outvars]
            for var, out in zip(eqn.outvars, outs):
                env[var] = out
        return [node(v) for v in jaxpr.outvars]

    inputs = [graph.add("input", []) for _ in closed.jaxpr.invars]
    outputs = walk(closed.jaxpr, inputs, False)
    position = {node: n for n, node in enumerate(inputs)}
    for site, nodes in operand_nodes:   # which inputs each operand's value comes from
        site.inputs = tuple(frozenset(position[a] for a in graph.ancestors([n])
                                      if a in position) if n is not None else frozenset()
                            for n in nodes)
        site.direct = tuple(frozenset(position[a] for a in graph.ancestors([n], kernels=False)
                                      if a in position) if n is not None else frozenset()
                            for n in nodes)
    live = graph.ancestors([o for o in outputs if o is not None])
    # A device's index in its mesh is not a constant: a value computed from it outside
    # the kernels differs from device to device, as data does.
    varying = [n for n, (kind, info) in enumerate(graph.info)
               if kind == "op" and info.get("name") == "axis_index"]
    data = graph.depends_on([n for n, (kind, _) in enumerate(graph.info) if kind == "input"]
                            + varying)
    floats = graph.depends_on([n for n, var in zip(inputs, closed.jaxpr.invars)
                               if not _integer_aval(var.aval)])
    ops = [Op(info["name"], info["nbytes"], not floats[n], not data[n])
           for n, (kind, info) in enumerate(graph.info)
           if kind == "op" and n in live and info["nbytes"]]
    used = {info["site"].index for n, (kind, info) in enumerate(graph.info)
            if kind == "kernel_out" and n in live}
    unused = [site for site in sites if site.index not in used]
    orphans = [k for k, o in enumerate(outputs)
               if o is None or not any(graph.info[a][0] == "kernel"
                                       for a in graph.ancestors([o]))]
    return Program(closed, out_tree, sites, ops, unused, orphans, callbacks, by_eqn)


class _Graph:
    """Which value depends on which: a node per value (or per kernel)."""

    def __init__(self):
        self.deps: list[list[int]] = []
        self.info: list[tuple[str, dict]] = []

    def add(self, kind: str, deps: list, **info) -> int:
        self.deps.append([d for d in deps if d is not None])
        self.info.append((kind, info))
        return len(self.deps) - 1

    def ancestors(self, nodes: list[int], kernels: bool = True) -> set[int]:
        """Every node ``nodes`` depend on; ``kernels=False``: not through a kernel."""
        seen, todo = set(), list(nodes)
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                if kernels or self.info[n][0] != "kernel":
                    todo.extend(self.deps[n])
        return seen

    def depends_on_inputs(self) -> list[bool]:
        return self.depends_on([n for n, (kind, _) in enumerate(self.info) if kind == "input"])

    def depends_on(self, sources: list[int]) -> list[bool]:
        """Per node, whether it depends on one of ``sources``."""
        wanted, data = set(sources), []
        for n in range(len(self.info)):  # nodes are added after their deps
            data.append(n in wanted or any(data[d] for d in self.deps[n]))
        return data


def _nbytes(eqn) -> int:
    total = 0
    for v in list(eqn.invars) + list(eqn.outvars):
        aval = getattr(v, "aval", None)
        shape, dtype = getattr(aval, "shape", None), getattr(aval, "dtype", None)
        if shape is not None and dtype is not None and not jaxcompat.is_literal(v):
            total += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return total


def _integer_aval(aval) -> bool:
    dtype = getattr(aval, "dtype", None)
    return dtype is not None and (np.issubdtype(dtype, np.integer) or dtype == np.bool_)


def _callbacks_in(kernel) -> list[str]:
    return [e.primitive.name for e in jaxcompat.equations(kernel) if e.primitive.name in _CALLBACKS]


_LIBRARY = ("jax/experimental/pallas/ops/", "jax\\experimental\\pallas\\ops\\")


def _foreign(kernel) -> str:
    """The JAX library file a kernel's code comes from (JAX's own Pallas kernels
    standing in for the learner's), or ""."""
    for eqn in jaxcompat.equations(kernel):
        for path, _ in jaxcompat.frames(eqn):
            if any(part in path for part in _LIBRARY):
                return path
    return ""


def site_of(program: Program, error: BaseException, sources) -> tuple[str, int] | None:
    """The learner's line an error about a kernel most likely comes from, from the
    kernels' own equations: a matmul that does not accumulate in 32 bits, a slice at
    a position only known at run time, else the kernel's definition."""
    import re

    text = str(error)
    operand = re.search(r'Out-of-bounds block index .*? for (?:input|output) "(\w+)"'
                        r'(?: in iteration \(([\d, ]*)\))?', text)
    if operand:  # an index map: point at it, not at the kernel
        step = tuple(int(i) for i in (operand[2] or "").split(",") if i.strip())
        found = [(site, block) for site in program.sites for block in site.call.blocks
                 if block.name == operand[1] and block.index_map_source]
        # Kernels that share an operand's name: the one whose grid has that step.
        ran = [block for site, block in found if len(site.call.grid) == len(step)
               and all(g is None or i < g for i, g in zip(step, site.call.grid))]
        blocks = ran or [block for _, block in found]
        return blocks[0].index_map_source if blocks else None
    wanted = (_low_precision_dot if "matmul acc" in text else
              _copy_out_of_smem if "copy_smem_to_gmem" in text else
              _slice_at_run_time if "out of bounds" in text.lower() else None)
    for site in program.sites:
        for eqn in jaxcompat.equations(site.call.kernel) if wanted else ():
            if wanted(eqn):
                line = _user_line(eqn, sources)
                if line:
                    return line
    if len(program.sites) == 1 and program.sites[0].call.source:  # the one kernel it can be
        return program.sites[0].call.source, program.sites[0].call.line
    return None


def _low_precision_dot(eqn) -> bool:
    return eqn.primitive.name == "dot_general" \
        and np.dtype(eqn.outvars[0].aval.dtype).itemsize != 4


def _copy_out_of_smem(eqn) -> bool:
    return eqn.primitive.name == "copy_smem_to_gmem"


def _slice_at_run_time(eqn) -> bool:
    return eqn.primitive.name in ("get", "swap") and any(
        not jaxcompat.is_literal(v) for v in eqn.invars[1:])


def _user_line(eqn, sources) -> tuple[str, int] | None:
    """The innermost frame of ``eqn`` in a chapter file (or, without those, outside JAX)."""
    from pathlib import Path

    for path, line in jaxcompat.frames(eqn):
        if sources is not None and Path(path).resolve() in sources:
            return path, line
        if sources is None and "/jax/" not in path and "pytest_pallas_hints" not in path \
                and not _standard_library(path):
            return path, line
    return None


def _standard_library(path: str) -> bool:
    import sysconfig

    return path.startswith(sysconfig.get_paths()["stdlib"]) and "site-packages" not in path


def learners(error: BaseException) -> BaseException:
    """Marks ``error`` as raised by the learner's code (or by JAX on its behalf), so
    that the plugin never mistakes it for a failure of the kit."""
    try:
        error.pallas_learner = True
    except AttributeError:
        pass
    return error


# ------------------------------------------------------------------- run ---

@dataclasses.dataclass
class Executed:
    """One run of one kernel: its site and the scalar-prefetch values it got; for a
    kernel inside a shard_map, one run per device (``device``: its index in the mesh,
    row-major over the mesh's axes)."""
    site: Site
    prefetch: list
    device: int | None = None


def execute(program: Program, args: tuple):
    """Runs the program once, compiled, every kernel multiplying as a TPU does
    (``jaxcompat.tpu_multiplies``). Returns its output and, per kernel run, the
    scalar-prefetch values it got."""
    import jax

    # Wait for the results here: an error the run raises (a learner's kernel failing
    # inside the interpreter's callbacks) surfaces now, as the run's, and not later
    # where the kit first reads the output.
    outs, captured = jax.block_until_ready(
        _runner(program, jaxcompat.multiplying_as_on_chip)(*jax.tree_util.tree_leaves(args)))
    return jax.tree_util.tree_unflatten(program.out_tree, outs), _executed(program, captured)


def _executed(program: Program, captured: list) -> list[Executed]:
    executed = [Executed(program.sites[index], [np.asarray(v) for v in values])
                for index, values in captured]
    # A kernel inside a shard_map ran once on every device of its mesh (the shard_map
    # runs as one op, so its kernels are not visited one by one; none of them may take
    # scalar prefetch, whose values differ per device: see Measured._countable).
    executed += [Executed(site, [], device=d) for site in program.sites
                 if site.mesh and not site.repeated and not site.call.num_prefetch
                 for d in range(site.devices)]
    return executed


def _runner(program: Program, params_of):
    """The program as one jitted function of its flat arguments, each kernel bound with
    ``params_of(kernel)`` for parameters; it returns the flat outputs and, per kernel
    run, (site index, its scalar-prefetch values)."""
    import jax

    closed = program.closed

    def run(*flat_args):
        captured = []

        def visit(eqn, invals):
            if invals is not None:   # None: a kernel inside a shard_map (bound with it)
                site = program.sites[program._by_eqn[id(eqn)]]
                captured.append((site.index, list(invals[:site.call.num_prefetch])))
            return params_of(eqn)

        outs = _evaluate(closed.jaxpr, closed.consts, flat_args, visit)
        return outs, captured

    return jax.jit(run)


def execute_perturbable(program: Program, args: tuple):
    """``execute``, with every dot of every kernel able to be perturbed afterwards
    without compiling again (``jaxcompat.perturbing``): a TPU kernel's ``dot_general``, a
    Mosaic GPU kernel's read of a wgmma accumulator. Returns the output, the kernel runs
    and ``perturbed(chosen)``: the output again, with the results of the dots in
    ``chosen`` (ids of equations; all of them in ``perturbed.dots``) perturbed; None
    where the kernels have no dot, or where the program with its dots made perturbable
    could not be built (the kit's fault: the learner's run is then the plain one)."""
    import jax

    made = {id(eqn): jaxcompat.call_site(eqn) for site in program.sites
            for eqn in jaxcompat.equations(site.call.kernel)
            if eqn.primitive.name == ("dot_general" if site.call.backend == "mosaic_tpu"
                                      else "wgmma_accumulator_deref")}
    dots = list(made)
    if not dots:
        return (*execute(program, args), None)
    tags = {dot: n for n, dot in enumerate(dots)}
    now = [frozenset()]
    flat = jax.tree_util.tree_leaves(args)
    try:   # compiled apart from the run: only a failure to build it is the kit's
        runner = _runner(program, lambda eqn: jaxcompat.multiplying_as_on_chip(
            jaxcompat.perturbed(eqn, tags, lambda: now[0]))).lower(*flat).compile()
    except Exception:
        return (*execute(program, args), None)

    def perturbed(chosen) -> object:
        now[0] = frozenset(tags[dot] for dot in chosen if dot in tags)
        try:
            outs, _ = jax.block_until_ready(runner(*flat))
        finally:
            now[0] = frozenset()
        return jax.tree_util.tree_unflatten(program.out_tree, outs)

    # Wait for the results here: an error the run raises (a learner's kernel failing
    # inside the interpreter's callbacks) surfaces now, as the run's. It is not run
    # again: the interpreter's memory may keep what the failed run left.
    outs, captured = jax.block_until_ready(runner(*flat))
    perturbed.dots = dots
    perturbed.together = _by_call_site(made)
    return (jax.tree_util.tree_unflatten(program.out_tree, outs),
            _executed(program, captured), perturbed)


def run_perturbed(program: Program, args: tuple, chosen) -> object:
    """The program's output with the results of the kernel equations in ``chosen`` (ids:
    any equation with one result, a load for instance) perturbed as
    ``jaxcompat.perturbing`` says; compiled for this one run."""
    import jax

    tags = {eqn: n for n, eqn in enumerate(chosen)}
    every = frozenset(tags.values())
    flat = jax.tree_util.tree_leaves(args)
    runner = _runner(program, lambda eqn: jaxcompat.multiplying_as_on_chip(
        jaxcompat.perturbed(eqn, tags, lambda: every)))
    outs, _ = jax.block_until_ready(runner(*flat))
    return jax.tree_util.tree_unflatten(program.out_tree, outs)


def _by_call_site(made: dict) -> dict:
    """dot id -> the ids of the dots one call in the learner's code made (``made``: id ->
    ``jaxcompat.call_site``), itself alone where the call is not known."""
    groups = {}
    for dot, site in made.items():
        groups.setdefault(dot if site is None else site, []).append(dot)
    return {dot: frozenset(group) for group in groups.values() for dot in group}


def lower_for_tpu(program: Program, args: tuple) -> None:
    """Lowers the program for a real TPU (raises what the lowering raises)."""
    import jax

    closed = program.closed

    def compiled(*flat_args):
        return _evaluate(closed.jaxpr, closed.consts, flat_args,
                         lambda eqn, invals: {"interpret": False})

    with jaxcompat.compiled_for_tpu():
        jax.jit(compiled).trace(*jax.tree_util.tree_leaves(args)).lower(
            lowering_platforms=("tpu",))


def _evaluate(jaxpr, consts, args, visit) -> list:
    """Applies ``jaxpr``'s equations one by one (calls inlined); ``visit(eqn, invals)``
    sees every pallas_call first and returns parameters to replace; a kernel inside a
    shard_map is bound with the shard_map: ``visit(kernel, None)`` for each."""
    env = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))

    def read(v):
        return v.val if jaxcompat.is_literal(v) else env[v]

    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        view = jaxcompat.control(eqn)
        if jaxcompat.is_kernel(eqn):
            outs = jaxcompat.bind(eqn, invals, **visit(eqn, invals))
        elif jaxcompat.shard_map_body(eqn) is not None:
            outs = jaxcompat.bind(jaxcompat.with_kernels(eqn, lambda kernel: visit(kernel, None)),
                                  invals)
        elif isinstance(view, jaxcompat.Inline):
            outs = _evaluate(*view.body, invals, visit)
        else:
            outs = jaxcompat.bind(eqn, invals)
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]
