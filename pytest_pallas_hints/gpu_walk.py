"""A Mosaic GPU kernel's control flow run on its integers alone: loops, branches,
barriers and wgmma groups, without the data.

GPU interpret mode runs a kernel's data, and cannot see three things a Hopper would:
a wgmma still reading an SMEM slot when a TMA copy refills it (the interpreter
finishes every wgmma at once), a barrier wait that nothing will ever complete (the
interpreter waits until the kit's time bound), a barrier arrival that no wait
observes. This module runs every block of the kernel's grid, each of its Pallas
threads as a coroutine, evaluating every scalar integer (loop counters, slots, grid
indices, step counts) and leaving every array unknown. Where control flow depends on
a value it does not know, it gives up: no verdict rather than a wrong one.

  refills   a TMA copy into an SMEM slot that a wgmma issued earlier may still be
            reading (no plgpu.wgmma_wait in between lets it finish);
  stuck     the waits a deadlock leaves blocked: every thread still running waits on
            a barrier that nothing left to run will complete;
  unwaited  completions of a barrier, by plgpu.barrier_arrive, that no wait observes;
  wgmmas    per block of the grid, the wgmmas it issued (the work it did);
  outside   TMA copies whose GMEM window leaves its ref (or the .at[...] view it
            copies from): a Hopper reads zeros there, or drops what it writes;
  ahead     the most copies into SMEM issued and not yet waited for at one moment:
            each thread runs as far as its waits let it, so a producer that may fill
            the next slot before the consumer has taken the last one shows 2 or more.

Nothing here runs JAX: it reads a kernel's jaxpr.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import operator

from . import jaxcompat, products
from .turns import Wait, take_turns

BUDGET = 300_000   # equations evaluated per kernel before giving up


class _Unknown(Exception):
    """Control flow hangs on a value this module does not know."""


@dataclasses.dataclass
class Refill:
    wgmma: object        # the wgmma_ref equation still reading the slot
    copy: object         # the copy_gmem_to_smem that overwrites it
    wait: object | None  # the last wgmma_wait (or accumulator read) before the copy


@dataclasses.dataclass
class Stuck:
    thread: int          # the Pallas thread (warpgroup) that waits
    wait: object         # its barrier_wait equation
    index: tuple         # the barrier's index in its array (() for one barrier)
    needs: int           # the completion it waits for (1 = the first)
    completions: int     # how many the barrier gets, in all
    iterations: tuple    # the iteration of each loop around the wait


@dataclasses.dataclass
class Unwaited:
    arrive: object       # the last barrier_arrive on the barrier
    index: tuple
    completions: int
    waits: int


@dataclasses.dataclass
class Outside:
    copy: object         # the copy_gmem_to_smem or copy_smem_to_gmem equation
    where: str           # "elements 128..192 along axis 1 of 128"
    block: dict          # the grid block (axis name -> index) that made it
    operand: int | None  # the kernel's operand (position) the GMEM ref is, where known


@dataclasses.dataclass
class GpuWalk:
    """What the walk of a kernel found, over every block of its grid."""
    wgmmas: dict         # block (its grid indices) -> wgmmas it issued
    refills: list
    stuck: list
    unwaited: list
    outside: list = dataclasses.field(default_factory=list)
    fetched: dict = dataclasses.field(default_factory=dict)   # block -> {operand: TMA
    #                      copies into SMEM from that kernel operand (its position)}
    roles: dict = dataclasses.field(default_factory=dict)     # thread -> Role, over
    #                      every block
    dots: dict = dataclasses.field(default_factory=dict)      # ((1, M, K, N), (a's dtype,
    #                      b's dtype), "default") -> wgmmas of that shape, every block
    copies: dict = dataclasses.field(default_factory=dict)    # (kernel operand position,
    #                      "read" or "written") -> [bytes, TMA copies], every block
    ahead: int = 0       # the most TMA copies into SMEM issued and not yet waited for
    #                      at one moment, in any block: 2 or more where a copy is issued
    #                      while the data of an earlier one still waits to be used
    outer: int = 0       # elements of multiplies that are a matmul written elementwise
    #                      (``products``), every block


@dataclasses.dataclass
class Role:
    """What one Pallas thread (warpgroup) did, over every block: the copies into SMEM
    it issued, and the operations on arrays (not scalars) it ran."""
    copies_in: int = 0
    array_ops: int = 0
    first_copy: object = None    # an equation of each, for the learner's line
    first_op: object = None


_CACHE: dict = {}


def walk(call) -> GpuWalk | None:
    """Runs one Mosaic GPU kernel (a KernelCall) on its integers; None where it cannot."""
    if getattr(call, "backend", "") != "mosaic_gpu":
        return None
    cached = _CACHE.get(id(call.kernel))
    if cached is not None and cached[0] is call.kernel:
        return cached[1]
    try:
        found = _Kernel(call).run()
    except (_Unknown, RecursionError):
        found = None
    except Exception:   # a primitive this module does not know how to read
        found = None
    if len(_CACHE) > 16:
        _CACHE.clear()
    _CACHE[id(call.kernel)] = (call.kernel, found)
    return found


# ------------------------------------------------------------------ scalars ---

def _div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_SCALAR = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "max": max, "min": min,
    "div": _div, "rem": lambda a, b: a - b * _div(a, b),
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
    "gt": operator.gt, "ge": operator.ge, "and": operator.and_, "or": operator.or_,
    "xor": operator.xor, "neg": operator.neg, "abs": abs,
    "not": lambda a: (not a) if isinstance(a, bool) else ~a,
    "sign": lambda a: (a > 0) - (a < 0),
    "select_n": lambda which, *cases: cases[int(which)],
    "clamp": lambda lo, x, hi: min(max(x, lo), hi),
    "convert_element_type": lambda a: a,
}


def _value(x):
    """A Python int or bool for a scalar integer constant, else None."""
    shape = getattr(x, "shape", ())
    if shape != ():
        return None
    kind = getattr(getattr(x, "dtype", None), "kind", None)
    if isinstance(x, bool) or kind == "b":
        return bool(x)
    if isinstance(x, int) or kind in ("i", "u"):
        return int(x)
    return None


def _scalar(eqn, ins):
    aval = eqn.outvars[0].aval
    if len(eqn.outvars) != 1 or getattr(aval, "shape", None) != () \
            or any(v is None or isinstance(v, _Ref) for v in ins):
        return None
    kind = getattr(getattr(aval, "dtype", None), "kind", None)
    if kind not in ("b", "i", "u"):
        return None
    out = _SCALAR[eqn.primitive.name](*ins)
    return bool(out) if kind == "b" else int(out)


# --------------------------------------------------------------------- refs ---

@dataclasses.dataclass(frozen=True)
class _Ref:
    root: object           # the allocation
    arrivals: int = 1      # a barrier's num_arrivals


def _ref(var, root):
    return _Ref(root, int(getattr(getattr(var.aval, "dtype", None), "num_arrivals", 1) or 1))


def _leaves(layout, ins, *names):
    """The transform leaves of each ref ``names`` of an equation (``jaxcompat.GpuRefs``),
    None where a leaf is a ref."""
    return [tuple(v if not isinstance(v, _Ref) else None for v in layout.leaves_of(name, ins))
            for name in names]


def _may_alias(a, b) -> bool:
    (root_a, index_a), (root_b, index_b) = a, b
    return root_a == root_b and (len(index_a) != len(index_b) or all(
        x is None or y is None or x == y for x, y in zip(index_a, index_b)))


# What computes on arrays (not a load, a store, a copy or a barrier: work on values).
_NOT_WORK = frozenset({"get", "swap", "copy_gmem_to_smem", "copy_smem_to_gmem",
                       "barrier_wait", "barrier_arrive", "commit_smem", "wait_smem_to_gmem",
                       "broadcast_in_dim", "reshape", "convert_element_type", "squeeze",
                       "iota", "pvary"})


def _on_arrays(eqn, view) -> bool:
    """Whether an equation is arithmetic on arrays (an add of tiles, a wgmma)."""
    if view is not None or eqn.primitive.name in _NOT_WORK:
        return False
    if eqn.primitive.name == "wgmma_ref":
        return True
    return any(getattr(getattr(v, "aval", None), "shape", ()) for v in eqn.outvars)


# -------------------------------------------------------------- the kernel ---

class _Kernel:
    def __init__(self, call):
        self.call = call
        self.spent = 0
        self.refills: list = []
        self.seen_refills: set = set()
        self.outside: dict = {}    # id(copy eqn) -> Outside, the first block's

    def run(self) -> GpuWalk:
        axes = list(self.call.axes)
        threads = self.call.threads if self.call.threads > 1 else 1
        thread_axis = axes.pop()[0] if threads > 1 and axes else None
        wgmmas, stuck, unwaited, fetched, dots, copies = {}, [], [], {}, {}, {}
        ahead = outer = 0
        roles = {number: Role() for number in range(threads)}
        for block in itertools.product(*(range(size) for _, size in axes)):
            where = {name: index for (name, _), index in zip(axes, block)}
            found = _Block(self, where, thread_axis, threads).run()
            wgmmas[block], fetched[block] = found.wgmmas, found.fetched
            ahead, outer = max(ahead, found.ahead), outer + found.outer
            for key, times in found.dots.items():
                dots[key] = dots.get(key, 0) + times
            for key, (nbytes, times) in found.copies.items():
                total = copies.setdefault(key, [0, 0])
                total[0] += nbytes
                total[1] += times
            for number, role in found.roles.items():
                total = roles[number]
                total.copies_in += role.copies_in
                total.array_ops += role.array_ops
                total.first_copy = total.first_copy or role.first_copy
                total.first_op = total.first_op or role.first_op
            if found.stuck and not stuck:
                stuck = found.stuck
            if found.unwaited and not unwaited:
                unwaited = found.unwaited
        return GpuWalk(wgmmas, self.refills, stuck, unwaited, list(self.outside.values()),
                       fetched, roles, dots, copies, ahead, outer)


class _Block:
    """One block of the grid: its threads, and the barriers they share."""

    def __init__(self, kernel: _Kernel, where: dict, thread_axis, threads: int):
        self.kernel, self.where, self.thread_axis, self.threads = kernel, where, thread_axis, \
            threads
        self.arrivals: dict = {}     # barrier key -> arrivals
        self.arrived_by: dict = {}   # barrier key -> the last barrier_arrive
        self.wgmmas = 0
        self.dots: dict = {}         # as GpuWalk.dots, this block's
        self.copies: dict = {}       # as GpuWalk.copies, this block's
        self.fetched: dict = {}      # kernel operand -> copies into SMEM from it
        self.roles = {number: Role() for number in range(threads)}
        self.stuck: list = []
        self.unwaited: list = []
        self.copied_to: set = set()  # barrier keys TMA copies into SMEM complete
        self.in_flight = 0           # copies into SMEM issued, not yet waited for
        self.ahead = 0               # the most at one moment
        self.outer = 0               # as GpuWalk.outer, this block's

    def completions(self, key) -> int:
        return self.arrivals.get(key, 0) // key[0].arrivals

    def run(self) -> "_Block":
        jaxpr = self.kernel.call.kernel
        threads = [_Thread(self, t) for t in range(self.threads)]
        stuck = take_turns([thread.start(jaxpr) for thread in threads])
        for number, wait in stuck:   # a deadlock: every thread left waits
            eqn, key, needs, iterations = wait.what
            self.stuck.append(Stuck(number, eqn, key[1], needs, self.completions(key),
                                    iterations))
        if stuck:
            return self
        waited = {}
        for thread in threads:
            for key, count in thread.waits.items():
                waited[key] = max(waited.get(key, 0), count)
        for key, arrive in self.arrived_by.items():
            if self.completions(key) > waited.get(key, 0):
                self.unwaited.append(Unwaited(arrive, key[1], self.completions(key),
                                              waited.get(key, 0)))
        return self


class _Thread:
    """One Pallas thread of a block, run as a coroutine that yields a ``turns.Wait`` while
    it is blocked (its ``what``: the barrier_wait, its barrier key, the completion it
    needs, the loop steps)."""

    def __init__(self, block: _Block, number: int):
        self.block, self.number = block, number
        self.waits: dict = {}
        self.pending: list = []      # wgmmas issued and not waited: (eqn, operand keys)
        self.last_wait = None
        self.iterations: list = []

    def start(self, jaxpr):
        args = [_ref(var, ("in", n)) for n, var in enumerate(jaxpr.invars)]
        return self._call(jaxpr, [], args)

    def _call(self, jaxpr, consts, args):
        env = {}
        for var, value in zip(jaxpr.constvars, consts):
            env[var] = value if isinstance(value, _Ref) else _value(value)
        for var, value in zip(jaxpr.invars, args):
            env[var] = value
        yield from self._run(jaxpr, env)
        return [self._read(env, v) for v in jaxpr.outvars]

    @staticmethod
    def _read(env, var):
        if jaxcompat.is_literal(var):
            return _value(var.val)
        return env.get(var)

    def _run(self, jaxpr, env):
        kernel = self.block.kernel
        outer = products.outer_muls(jaxpr)
        for eqn in jaxpr.eqns:
            if outer and id(eqn) in outer:
                self.block.outer += math.prod(eqn.outvars[0].aval.shape)
            kernel.spent += 1
            if kernel.spent > BUDGET:
                raise _Unknown("too many steps")
            name = eqn.primitive.name
            ins = [self._read(env, v) for v in eqn.invars]
            outs = None
            view = jaxcompat.control(eqn)
            if _on_arrays(eqn, view):
                role = self.block.roles[self.number]
                role.array_ops += 1
                role.first_op = role.first_op or eqn
            if name in _SCALAR:
                outs = [_scalar(eqn, ins)]
            elif name == "axis_index":
                axes = jaxcompat.mesh_axes(eqn)
                outs = [self.number if axes == (self.block.thread_axis,)
                        else self.block.where.get(axes[0]) if len(axes) == 1 else None]
            elif isinstance(view, jaxcompat.Branches):
                which, operands = view.split(ins)
                if which is None:
                    raise _Unknown("a branch on an unknown value")
                outs = yield from self._call(*view.picked(which), operands)
            elif isinstance(view, jaxcompat.Loop):
                outs = yield from self._loop(view, eqn, ins)
            elif isinstance(view, jaxcompat.Scoped):
                inner, _ = view.body
                scoped = [_ref(var, ("scoped", id(var))) for var in inner.invars]
                inner_env = dict(zip(inner.constvars, ins))
                inner_env.update(zip(inner.invars, scoped))
                yield from self._run(inner, inner_env)
                outs = [self._read(inner_env, v) for v in inner.outvars]
            elif isinstance(view, jaxcompat.Inline):
                outs = yield from self._call(*view.body, ins)
            elif name == "wgmma_ref":
                self._wgmma(eqn, ins)
            elif jaxcompat.wgmma_left_running(eqn) is not None:
                self._retire(jaxcompat.wgmma_left_running(eqn), eqn)
            elif name == "copy_gmem_to_smem":
                self._copy_in(eqn, ins)
            elif name == "copy_smem_to_gmem":
                self._copy_out(eqn, ins)
            elif name == "barrier_arrive":
                layout = jaxcompat.gpu_refs(eqn)
                if not layout.skipped(ins):
                    self._arrive(self._key(layout.ref("barrier", ins),
                                           _leaves(layout, ins, "barrier")[0]), eqn,
                                 by_thread=True)
            elif name == "barrier_wait":
                layout = jaxcompat.gpu_refs(eqn)
                key = self._key(layout.ref("barrier", ins), _leaves(layout, ins, "barrier")[0])
                needs = self.waits.get(key, 0) + 1
                if self.block.completions(key) < needs:
                    yield Wait(lambda key=key, needs=needs: self.block.completions(key) >= needs,
                               (eqn, key, needs, tuple(self.iterations)))
                self.waits[key] = needs
                if key in self.block.copied_to:   # a copy's data, taken
                    self.block.in_flight = max(self.block.in_flight - 1, 0)
            elif jaxcompat.parts(eqn) and name not in ("custom_vmap_call",):
                raise _Unknown(f"{name}: a body this module does not run")
            if outs is None or len(outs) != len(eqn.outvars):
                outs = [None] * len(eqn.outvars)
            for var, value in zip(eqn.outvars, outs):
                env[var] = value

    # -- loops, stepped on their integers
    def _loop(self, view: jaxcompat.Loop, eqn, ins):
        cargs, bargs, carry, xs = view.split(ins)
        body, body_consts = view.body
        if view.kind == "scan":
            for step in view.iterations():
                self.iterations.append(step)
                out = yield from self._call(body, body_consts,
                                            [*bargs, *carry, *([None] * len(xs))])
                self.iterations.pop()
                carry = out[:view.num_carry]
            return [*carry, *([None] * (len(eqn.outvars) - view.num_carry))]
        cond, cond_consts = view.cond
        step = 0
        while True:
            go = yield from self._call(cond, cond_consts, [*cargs, *carry])
            if go[0] is None:
                raise _Unknown("a loop bound that is not known")
            if not go[0]:
                return carry
            self.iterations.append(step)
            carry = yield from self._call(body, body_consts, [*bargs, *carry])
            self.iterations.pop()
            step += 1

    # -- the asynchronous units: the tensor core and the TMA engine
    def _wgmma(self, eqn, ins):
        layout = jaxcompat.gpu_refs(eqn)
        a, b = _leaves(layout, ins, "a", "b")
        keys = [(ref.root, leaves) for ref, leaves in ((layout.ref("a", ins), a),
                                                       (layout.ref("b", ins), b))
                if isinstance(ref, _Ref)]
        self.pending.append((eqn, keys))
        self.block.wgmmas += 1
        try:   # its work, for the cost (a layout this JAX builds otherwise: not counted)
            (m, n), a = layout.window("acc"), layout.window("a")
        except Exception:
            return
        dtypes = tuple(str(layout.eqn.invars[layout.refs[layout.names.index(name)]].aval.dtype)
                       for name in ("a", "b"))
        key = ((1, m, math.prod(a) // m, n), dtypes, "default")
        self.block.dots[key] = self.block.dots.get(key, 0) + 1

    def _copied(self, eqn, layout, gmem: str, ins, direction: str):
        """A TMA copy's bytes, on the GMEM operand it reads or writes."""
        root = getattr(layout.ref(gmem, ins), "root", None)
        aval = eqn.invars[layout.refs[layout.names.index(gmem)]].aval
        try:   # a window this JAX builds otherwise: not counted
            nbytes = math.prod(layout.window(gmem)) * aval.dtype.itemsize
        except Exception:
            return
        key = (root[1] if root and root[0] == "in" else None, direction)
        total = self.block.copies.setdefault(key, [0, 0])
        total[0] += nbytes
        total[1] += 1

    def _retire(self, left: int, eqn):
        self.pending = self.pending[len(self.pending) - left:] if left > 0 else []
        self.last_wait = eqn

    def _copy_in(self, eqn, ins):
        layout = jaxcompat.gpu_refs(eqn)
        if layout.skipped(ins):
            return
        self._window(eqn, layout, "src", ins)
        self._copied(eqn, layout, "src", ins, "read")
        role = self.block.roles[self.number]
        role.copies_in += 1
        role.first_copy = role.first_copy or eqn
        source = getattr(layout.ref("src", ins), "root", None)
        if source and source[0] == "in":
            self.block.fetched[source[1]] = self.block.fetched.get(source[1], 0) + 1
        dst = layout.ref("dst", ins)
        if isinstance(dst, _Ref):
            written = (dst.root, _leaves(layout, ins, "dst")[0])
            for wgmma, keys in self.pending:
                if any(_may_alias(key, written) for key in keys) \
                        and (id(wgmma), id(eqn)) not in self.block.kernel.seen_refills:
                    self.block.kernel.seen_refills.add((id(wgmma), id(eqn)))
                    self.block.kernel.refills.append(Refill(wgmma, eqn, self.last_wait))
        if "barrier" in layout.names:
            key = self._key(layout.ref("barrier", ins), _leaves(layout, ins, "barrier")[0])
            self._arrive(key, eqn, by_thread=False)
            block = self.block
            block.copied_to.add(key)
            block.in_flight += 1
            block.ahead = max(block.ahead, block.in_flight)

    def _copy_out(self, eqn, ins):
        layout = jaxcompat.gpu_refs(eqn)
        if not layout.skipped(ins):
            self._window(eqn, layout, "dst", ins)
            self._copied(eqn, layout, "dst", ins, "written")

    def _window(self, eqn, layout, name: str, ins):
        """Notes a copy whose GMEM window (its ref ``name``) leaves its ref."""
        outside = self.block.kernel.outside
        if id(eqn) in outside:
            return
        try:
            transforms = layout.transforms(name, _leaves(layout, ins, name)[0])
        except Exception:   # a transform this JAX builds differently: no verdict
            return
        if not transforms:
            return
        where = jaxcompat.outside_view(layout.shape(name), transforms)
        if where:
            root = getattr(layout.ref(name, ins), "root", None)
            outside[id(eqn)] = Outside(eqn, where, dict(self.block.where),
                                       root[1] if root and root[0] == "in" else None)

    # -- barriers
    @staticmethod
    def _key(ref, leaves):
        if not isinstance(ref, _Ref) or any(v is None for v in leaves):
            raise _Unknown("a barrier whose index is not known")
        return (ref, tuple(leaves))

    def _arrive(self, key, eqn, by_thread: bool):
        self.block.arrivals[key] = self.block.arrivals.get(key, 0) + 1
        if by_thread:
            self.block.arrived_by[key] = eqn
