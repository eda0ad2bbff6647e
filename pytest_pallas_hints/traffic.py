"""Bytes a kernel moves between HBM and VMEM: what makes most kernels fast or slow.

``moved_bytes(fn, *args)`` runs ``fn`` and sums, over every ``pallas_call``
it makes, the traffic a TPU's pipeline would cause:

* an input block is copied HBM -> VMEM at the first grid step and whenever
  its block index differs from the previous step's (grid steps in row-major
  order, the last axis fastest), so a block that stays put is fetched once;
* an output block is copied VMEM -> HBM whenever its index is about to
  change, and at the last step;
* index maps are evaluated on the real scalar-prefetch values; the prefetch
  operands themselves are not counted;
* operands left in HBM (``memory_space=pl.ANY``) count only what the
  kernel's own DMAs (``pltpu.make_async_copy``) move, as they run (with
  JAX >= 0.9, whose interpreter lets them be watched: ``counts_manual_dmas()``).

A block that hangs off the end of its array counts only its in-bounds part.

Work done outside any kernel (plain JAX ops around the ``pallas_call``) is
counted apart, in ``outside``: every such op reads its operands and writes its
result (reshapes are free), an upper bound that makes an unfused step visible.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools

import numpy as np

MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Operand:
    kernel: str
    name: str
    direction: str     # "read" (HBM -> VMEM) or "written" (VMEM -> HBM)
    bytes: int
    array_bytes: int   # the size of the whole array, for "read 4 times"
    copies: int


@dataclasses.dataclass(frozen=True)
class Traffic:
    read: int                          # HBM -> VMEM, by the kernels
    written: int                       # VMEM -> HBM, by the kernels
    operands: tuple[Operand, ...] = ()
    outside: int = 0                   # bytes read and written by JAX ops outside kernels
    outside_ops: tuple[Operand, ...] = ()
    output: object = None              # what fn returned, so one run serves two checks

    @property
    def total(self) -> int:
        return self.read + self.written

    def __str__(self) -> str:
        return f"{mib(self.read)} read, {mib(self.written)} written"


def mib(*sizes: int) -> str | list[str]:
    """Byte counts in one unit (MiB, or KiB when all are small): '3.1 MiB'."""
    unit, name = (MiB, "MiB") if max(sizes) >= MiB // 4 else (1024, "KiB")
    shown = [f"{n / unit:.3g} {name}" for n in sizes]
    return shown[0] if len(shown) == 1 else shown


def moved_bytes(fn, *args, **static) -> Traffic:
    """Runs ``fn(*args, **static)`` and returns the bytes its kernels move."""
    import jax

    run = functools.partial(fn, **static)
    kernels, outside, straight = survey(jax.make_jaxpr(run)(*args).jaxpr)
    dmas: list[Operand] = []
    if straight:  # every kernel runs once, no scalar prefetch: count from the trace
        calls = [(params, []) for params in kernels]
        with _recording_dmas(dmas):
            output = jax.block_until_ready(jax.jit(run)(*args))
    else:  # run step by step to see each kernel with its concrete prefetch values
        calls = []
        with _recording_calls(calls), _recording_dmas(dmas), jax.disable_jit():
            output = jax.block_until_ready(run(*args))
    operands = [op for params, values in calls for op in _pipelined(params, values)] + dmas
    return Traffic(read=sum(o.bytes for o in operands if o.direction == "read"),
                   written=sum(o.bytes for o in operands if o.direction == "written"),
                   operands=tuple(operands), outside=sum(o.bytes for o in outside),
                   outside_ops=tuple(outside), output=output)


_FREE = {"reshape", "squeeze", "expand_dims", "bitcast_convert_type"}
_REPEATING = {"while", "scan", "cond", "switch"}  # a kernel inside runs 0 or many times


def survey(jaxpr) -> tuple[list[dict], list[Operand], bool]:
    """The pallas_calls of ``jaxpr`` (their params), the bytes moved by the other JAX
    ops per primitive, and whether each kernel runs exactly once without scalar
    prefetch (so that its traffic follows from the trace alone)."""
    from jax._src import core

    kernels: list[dict] = []
    moved: dict[str, int] = {}
    straight = True

    def walk(jaxpr, repeating: bool):
        nonlocal straight
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name == "pallas_call":
                kernels.append(eqn.params)
                straight &= not repeating and eqn.params["grid_mapping"].num_index_operands == 0
                continue
            if name in _FREE:
                continue
            inner = [j for v in eqn.params.values()
                     for j in (v if isinstance(v, (tuple, list)) else [v])
                     if isinstance(j, (core.Jaxpr, core.ClosedJaxpr))]
            if inner:  # jit, custom_vjp, cond...: count what they contain
                for j in inner:
                    walk(getattr(j, "jaxpr", j), repeating or name in _REPEATING)
                continue
            size = sum(_nbytes(v.aval) for v in eqn.invars if isinstance(v, core.Var)) + \
                sum(_nbytes(v.aval) for v in eqn.outvars)
            moved[name] = moved.get(name, 0) + size

    walk(jaxpr, False)
    outside = [Operand(kernel="outside kernels", name=name, direction="read+written",
                       bytes=size, array_bytes=size, copies=1) for name, size in moved.items()]
    return kernels, outside, straight


def _nbytes(aval) -> int:
    shape, dtype = getattr(aval, "shape", None), getattr(aval, "dtype", None)
    if shape is None or dtype is None:
        return 0
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _pipelined(params: dict, values: list) -> list[Operand]:
    """The BlockSpec traffic of one pallas_call, from its grid and index maps."""
    mapping = params["grid_mapping"]
    grid = tuple(int(g) for g in mapping.grid)
    prefetch = [np.asarray(v) for v in values[:mapping.num_index_operands]]
    steps = np.indices(grid).reshape(len(grid), -1).T if grid else np.zeros((1, 0), int)
    names = _operand_names(params, mapping)
    kernel = str(params.get("name") or getattr(params["jaxpr"].debug_info, "func_name", "kernel"))
    operands = []
    for n, block in enumerate(mapping.block_mappings):
        if _left_in_hbm(block):
            continue
        is_input = n < mapping.num_inputs
        starts, sizes = _block_windows(block, steps, prefetch)
        moved = (starts != np.roll(starts, 1, axis=0)).any(axis=1)  # new block this step
        if is_input:
            moved[0] = True
        else:  # written back before the index changes, and at the end
            moved = np.roll(moved, -1)
            moved[-1] = True
        shape = np.asarray(block.array_aval.shape)
        in_bounds = np.clip(np.minimum(sizes, shape - starts), 0, None).prod(axis=1)
        itemsize = np.dtype(block.array_aval.dtype).itemsize
        operands.append(Operand(
            kernel=kernel, name=names[n], direction="read" if is_input else "written",
            bytes=int(in_bounds[moved].sum()) * itemsize,
            array_bytes=int(shape.prod()) * itemsize, copies=int(moved.sum())))
    return operands


def _block_windows(block, steps: np.ndarray, prefetch: list) -> tuple[np.ndarray, np.ndarray]:
    """Start offsets and sizes of ``block``'s window at every grid step."""
    from jax._src.pallas import core as pallas_core

    indices = _index_map(block.index_map_jaxpr, steps, prefetch)
    starts, sizes = [], []
    for d, dim in enumerate(block.block_shape):
        if isinstance(dim, pallas_core.Blocked):
            starts.append(indices[:, d] * dim.block_size)
            sizes.append(dim.block_size)
        else:  # Squeezed (size 1) or Element (the index is an element offset)
            starts.append(indices[:, d])
            sizes.append(getattr(dim, "block_size", 1))
    return np.stack(starts, axis=1), np.broadcast_to(sizes, (len(steps), len(sizes)))


def _index_map(closed, steps: np.ndarray, prefetch: list) -> np.ndarray:
    """The block indices an index map returns at every grid step, evaluated at once:
    in NumPy for plain integer arithmetic (no compile), else with JAX."""
    columns = [steps[:, i] for i in range(steps.shape[1])]
    if not prefetch:
        try:
            outputs = _numpy_eval(closed.jaxpr, closed.consts, columns)
            return np.stack([np.broadcast_to(np.asarray(o, np.int64), len(steps))
                             for o in outputs], axis=1)
        except _NotPlain:
            pass
    return _jax_index_map(closed, steps, prefetch)


class _NotPlain(Exception):
    """An index map using something the NumPy evaluator does not know."""


def _trunc_div(a, b):
    return np.trunc(np.true_divide(a, b)).astype(np.result_type(a, b))


_NUMPY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _trunc_div,
    "rem": np.fmod, "max": np.maximum, "min": np.minimum, "neg": np.negative,
    "abs": np.abs, "sign": np.sign, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal,
    "and": np.logical_and, "or": np.logical_or, "not": np.logical_not,
    "select_n": lambda which, *cases: np.choose(np.asarray(which, np.int64), cases),
    "clamp": lambda lo, x, hi: np.clip(x, lo, hi),
}
_PASS_THROUGH = {"convert_element_type", "squeeze", "reshape", "broadcast_in_dim", "copy",
                 "copy_p"}


def _numpy_eval(jaxpr, consts, args):
    from jax._src import core

    env = {}

    def read(v):
        return v.val if isinstance(v, core.Literal) else env[v]

    for var, value in zip(jaxpr.constvars, consts):
        env[var] = np.asarray(value)
    for var, value in zip(jaxpr.invars, args):
        env[var] = value
    for eqn in jaxpr.eqns:
        name, values = eqn.primitive.name, [read(v) for v in eqn.invars]
        if name in _NUMPY:
            out = [_NUMPY[name](*values)]
        elif name in _PASS_THROUGH and len(values) == 1 and not eqn.outvars[0].aval.shape:
            out = values
        elif name == "integer_pow":
            out = [np.power(values[0], eqn.params["y"])]
        elif name in ("pjit", "jit", "closed_call"):
            inner = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
            out = _numpy_eval(inner.jaxpr, inner.consts, values)
        else:
            raise _NotPlain(name)
        for var, value in zip(eqn.outvars, out):
            env[var] = value
    return [read(v) for v in jaxpr.outvars]


def _jax_index_map(closed, steps: np.ndarray, prefetch: list) -> np.ndarray:
    import jax
    from jax._src import core
    from jax._src.state.types import AbstractRef

    jaxpr, consts = closed.jaxpr, closed.consts
    if any(isinstance(v.aval, AbstractRef) for v in jaxpr.invars):
        jaxpr, consts = _discharged(closed)  # prefetch refs become arrays
    outputs = len(closed.jaxpr.outvars)

    def at(step):
        return core.eval_jaxpr(jaxpr, consts, *step, *prefetch)[:outputs]

    if steps.shape[1] == 0:
        return np.asarray([at(())], dtype=np.int64).reshape(1, -1)
    columns = jax.jit(jax.vmap(at))(tuple(np.asarray(steps[:, i], np.int32)
                                          for i in range(steps.shape[1])))
    return np.stack([np.broadcast_to(np.asarray(c), len(steps)) for c in columns], axis=1)


def _discharged(closed):
    """``closed`` with its refs turned into plain array inputs (and extra outputs)."""
    from jax._src.state.discharge import discharge_state

    try:  # JAX >= 0.9: a ClosedJaxpr in, a ClosedJaxpr out
        result = discharge_state(closed)
        return result.jaxpr, result.consts
    except TypeError:
        return discharge_state(closed.jaxpr, closed.consts)


def _operand_names(params, mapping) -> list[str]:
    names = getattr(params["jaxpr"].debug_info, "arg_names", None)
    if names is not None and hasattr(mapping, "slice_block_ops"):
        picked = list(names[mapping.slice_block_ops])
        if len(picked) == len(mapping.block_mappings) and all(picked):
            return picked
    return [str(b.origin) for b in mapping.block_mappings]


def _left_in_hbm(block) -> bool:
    space = getattr(block.transformed_block_aval, "memory_space", None)
    return str(getattr(space, "value", space)).lower() in ("any", "hbm", "semaphore_mem")


@contextlib.contextmanager
def _recording_calls(calls: list):
    """Records each pallas_call's parameters and concrete operands as it runs."""
    from jax._src.pallas import pallas_call

    primitive = pallas_call.pallas_call_p
    original = primitive.impl

    def impl(*args, **params):
        calls.append((params, list(args)))
        return original(*args, **params)

    primitive.def_impl(impl)
    try:
        yield
    finally:
        primitive.def_impl(original)


def _interpreter():
    """The TPU interpreter's DMA class and memory-space names, where this JAX has them
    (JAX >= 0.9); None where manual DMAs cannot be counted."""
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interpreter
    except ImportError:
        return None
    if not all(hasattr(interpreter, name) for name in
               ("DMA", "DmaState", "TPU_MEMORY_SPACE_NAMES")) \
            or not hasattr(interpreter.DMA, "execute_read"):
        return None
    return interpreter


def counts_manual_dmas() -> bool:
    return _interpreter() is not None


@contextlib.contextmanager
def _recording_dmas(dmas: list):
    """Records every DMA the TPU interpreter executes (make_async_copy and friends)."""
    interpreter = _interpreter()
    if interpreter is None:
        yield
        return
    spaces = interpreter.TPU_MEMORY_SPACE_NAMES
    original = interpreter.DMA.execute_read

    def execute_read(dma):
        started = dma.state == interpreter.DmaState.STARTED
        original(dma)
        if not (started and dma.data is not None):
            return
        source = str(spaces.get(dma.src_memory_space, "")).lower()
        target = str(spaces.get(dma.dst_memory_space, "")).lower()
        off_chip = ("any", "hbm")
        direction = ("read" if source in off_chip and target not in off_chip else
                     "written" if target in off_chip and source not in off_chip else "copied")
        dmas.append(Operand(kernel="dma", name=f"{source} -> {target}", direction=direction,
                            bytes=int(dma.data_size), array_bytes=int(dma.data_size), copies=1))

    interpreter.DMA.execute_read = execute_read
    try:
        yield
    finally:
        interpreter.DMA.execute_read = original
