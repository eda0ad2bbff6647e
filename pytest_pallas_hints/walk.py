"""A NumPy walk over the integer side of a jaxpr: what the kit counts without
running anything twice.

A kernel's control flow (``pl.when``, ``fori_loop`` bounds, which block an
index map picks) depends on grid indices, sizes and scalar-prefetch values,
all of which the kit knows once the learner's program ran. The data the kernel
loads from VMEM it does not know, and does not need. So a jaxpr is walked with
every value either a NumPy array or ``UNKNOWN``:

* ``index_maps``: the block indices an index map returns at every grid step
  (vectorised: each grid index is a column of all the steps at once);
* ``kernel_counts``: per grid step, the flops of every ``dot_general`` the
  kernel executes (a dot under a ``pl.when`` that is false counts zero, a dot
  in a ``fori_loop`` counts once per iteration), the bytes of every DMA it
  starts (``make_async_copy``) and which operand each copies from or into, and
  how often each operation ran while a copy was in flight (overlap is compute
  done while data moves, not copies started together);
* the DMA ledger of a kernel run (``Ledger``): every copy started and every
  wait, per semaphore, in the order the kernel runs them (grid steps in order,
  scratch kept from one step to the next). A wait on a semaphore with no copy in
  flight would wait forever, a copy still in flight when the kernel (or its
  ``run_scoped``) ends was never waited, a copy into a window that another copy
  in flight is still writing races with it: each is a ``DmaProblem`` that names
  its equations, so the learner's lines can be shown before anything runs.

A branch or loop whose condition depends on loaded data cannot be counted:
``Uncountable`` says where.
"""
from __future__ import annotations

import dataclasses
import types

from .frozen import np

from . import jaxcompat, products
from .turns import Wait, finished, take_turns


class _Unknown:
    def __repr__(self):
        return "UNKNOWN"


UNKNOWN = _Unknown()


class Uncountable(Exception):
    """Control flow that depends on data the kernel loaded."""


NONE = frozenset()


@dataclasses.dataclass
class Uses:
    """Which dots' results are used. Every dot a kernel runs is a run (its flops); every
    value, ref and loop carry of the walk remembers the runs it was computed from and the
    refs it was loaded from (its marks: ``marks`` per jaxpr variable, ``_Ref.marks`` per
    ref; a ref is a negative mark), through every op but a product with a known zero or a
    select whose known predicate drops it. A run is used when what an output ref holds at
    the end of a grid step was computed from it, or when it was stored into a ref whose
    loads reach an output: the state a kernel carries is used even where its last update
    is read by no later step (the last chunk of a sequence). Shared by the devices of a
    mesh (a remote copy carries its marks to the other device)."""
    flops: list = dataclasses.field(default_factory=list)     # per run
    device: list = dataclasses.field(default_factory=list)    # per run: the device it ran on
    in_flight: list = dataclasses.field(default_factory=list)  # per run: the refs the
    #                                                           copies in flight land in
    remote: list = dataclasses.field(default_factory=list)    # per run: those of the
    #                                                           copies between devices
    reached: set = dataclasses.field(default_factory=set)     # marks that reached an output
    stored: dict = dataclasses.field(default_factory=dict)    # ref mark -> runs stored in it
    marks: dict = dataclasses.field(default_factory=dict)     # device -> jaxpr variable ->
    #   marks (per device: the devices of a mesh take turns through the same jaxpr)
    terms: dict = dataclasses.field(default_factory=dict)     # device -> jaxpr variable ->
    #   {variable: coefficient}: a sum of other variables' values (add, sub, neg, a cast,
    #   a constant factor), so that (x + d) - d keeps x's marks and drops d's
    refs: int = 0                                             # ref marks handed out
    eqns: list = dataclasses.field(default_factory=list)      # per run: id of its equation
    constant: set = dataclasses.field(default_factory=set)    # runs with an operand loaded
    #   from no ref (built in the kernel: an identity from iota): they multiply no data

    def run(self, flops: int, device: int | None, in_flight: tuple, eqn=None,
            remote: tuple = ()) -> int:
        self.eqns.append(id(eqn))
        self.flops.append(flops)
        self.device.append(device)
        self.in_flight.append(in_flight)
        self.remote.append(remote)
        return len(self.flops) - 1

    def mark_of(self, ref) -> int:
        """The (negative) mark of a ref: what is loaded from it carries it."""
        if ref.mark is None:
            self.refs += 1
            ref.mark = -self.refs
        return ref.mark

    def store(self, ref, marks) -> None:
        self.stored.setdefault(self.mark_of(ref), set()).update(m for m in marks if m >= 0)

    def reach(self, refs) -> None:
        """The end of a grid step: what these output refs hold is written back, used."""
        for ref in refs:
            self.reached |= ref.marks | {self.mark_of(ref)}

    def live(self, ref) -> bool:
        """Whether what lands in ``ref`` is used: it is an output, or what is loaded from
        it reaches one."""
        return ref.mark is not None and ref.mark in self.reached

    def used(self) -> set:
        runs = {m for m in self.reached if m >= 0}
        for mark in self.reached:
            if mark < 0:
                runs |= self.stored.get(mark, set())
        return runs

    def used_flops(self, device: int | None = None, idle=None) -> int:
        """The flops of ``device``'s used runs; with ``idle`` (ids of dots whose result,
        perturbed, left the output as it was), only of those that multiply data and are
        not runs of those dots."""
        return sum(self.flops[r] for r in self.used() if self.device[r] == device and (
            idle is None or (self.eqns[r] not in idle and r not in self.constant)))

    def constant_flops(self, device: int | None = None) -> int:
        """The flops of ``device``'s used runs that multiply by a matrix built in the
        kernel from no data (``constant``)."""
        return sum(self.flops[r] for r in self.used() & self.constant
                   if self.device[r] == device)

    def reaching_eqns(self, device: int | None = None) -> dict:
        """id -> flops, of the dot equations with a run on ``device`` whose result reached an
        output (directly, or loaded from a ref it was stored in): those whose use a run
        can show. A dot used only as the state a kernel carries past its last read (the
        last chunk's update) is used by this rule alone."""
        found = {}
        for r in self.reached:
            if r >= 0 and self.device[r] == device:
                found[self.eqns[r]] = found.get(self.eqns[r], 0) + self.flops[r]
        return found

    def used_runs(self, device: int | None = None, overlapped: bool = False,
                  remote: bool = False) -> int:
        """The runs of ``device`` whose results are used; ``overlapped``: those run while
        a copy whose data is used was in flight (``remote``: a copy between devices)."""
        flying = self.remote if remote else self.in_flight
        return sum(1 for r in self.used() if self.device[r] == device
                   and (not overlapped or any(map(self.live, flying[r]))))


@dataclasses.dataclass
class Counts:
    flops: int = 0
    dmas: list = dataclasses.field(default_factory=list)   # (source space, target space, bytes)
    most_in_flight: int = 0       # the most DMAs started and not yet waited, at any moment
    dma_problems: list = dataclasses.field(default_factory=list)   # DmaProblem, in order
    dmas_followed: bool = True    # False: a copy the ledger could not follow (remote, or
    #                               a semaphore index it cannot know), so no problem is told
    dma_windows: list = dataclasses.field(default_factory=list)    # (source operand, its
    #                               box, destination operand, its box) per DMA started
    dma_operands: list = dataclasses.field(default_factory=list)   # (source operand,
    #                               destination operand, bytes) per DMA: kernel operand
    #                               positions (None: a scratch or a run_scoped buffer)
    outside: list = dataclasses.field(default_factory=list)      # (get/swap equation, what
    #                               part past the ends of its ref), on the kernel's sure path
    stores: set = dataclasses.field(default_factory=set)         # (grid point, operand)
    #                               of every store or DMA into a kernel operand; one in a
    #                               branch the walk cannot decide counts as made
    loads: set = dataclasses.field(default_factory=set)          # (grid point, operand)
    #                               of every load from a kernel operand, the same way
    dot_flops: dict = dataclasses.field(default_factory=dict)     # operand dtype -> flops
    step_flops: list = dataclasses.field(default_factory=list)    # dot flops per grid step
    elementwise: int = 0          # elements produced by the other work (the vector units)
    transcendental: int = 0       # of those, elements of exp, log, tanh... (the EUP's work)
    outer: int = 0                # of those, elements of multiplies that are outer
    #                               products (``products``): a matmul done elementwise
    dots: dict = dataclasses.field(default_factory=dict)          # (dot shape, dtypes,
    #                               precision) per jaxcompat.dot_shape -> times executed
    executed: dict = dataclasses.field(default_factory=dict)      # primitive -> times run
    overlapped: dict = dataclasses.field(default_factory=dict)    # primitive -> times run
    #                               while at least one DMA was in flight
    remote: list = dataclasses.field(default_factory=list)   # (target device, bytes,
    #                               source operand, destination operand) per copy this
    #                               device started into another device (a remote DMA)
    during: dict = dataclasses.field(default_factory=dict)   # primitive -> per run while
    #                               a DMA was in flight, the refs those copies land in
    uses: Uses = dataclasses.field(default_factory=Uses)   # which dots' results were used
    device: int | None = None     # on a mesh: this device (its runs in ``uses``)
    unset_reads: list = dataclasses.field(default_factory=list)   # (grid point, get
    #                               equation) of each scratch's first load, where no store
    #                               had written any of it yet (garbage on a TPU, NaN in
    #                               interpret mode): evidence for a NaN, never a verdict
    #                               alone (a select may drop what was read)
    resets: list = dataclasses.field(default_factory=list)   # (grid point, swap equation)
    #                               of every store of a known value (zeros, -inf) over the
    #                               whole of a scratch: where its sum or statistic starts

    def carrying(self, name: str, remote: bool = False) -> int:
        """How many times ``name`` ran while a copy was in flight whose data is used (it
        lands in a ref that is read on the way to an output, or in an output), a dot only
        where its own result is used: compute overlapped with the copies that matter.
        ``remote``: a copy between devices (a dot only)."""
        if name == "dot_general":
            return self.uses.used_runs(self.device, overlapped=True, remote=remote)
        if remote:
            raise ValueError("carrying(remote=True) follows dots only")
        return sum(1 for lands in self.during.get(name, ()) if any(map(self.uses.live, lands)))

    @property
    def used_flops(self) -> int:
        """The flops of the dots whose results reached an output (``Uses``)."""
        return self.uses.used_flops(self.device)



@dataclasses.dataclass
class DmaProblem:
    """An unmatched DMA start or wait: ``kind`` is "dma_never_started" (a wait with no
    copy in flight on its semaphore: it would wait forever), "dma_waited_twice" (the
    same, for a wait whose copy an earlier wait already took), "dma_not_waited" (a copy
    still in flight when the kernel or its run_scoped ends), "dma_overwrite" (a copy
    started into a window another copy in flight still writes), "dma_wrong_semaphore"
    (a wait that describes a copy but names another semaphore than it signals: blamed
    on the wait, the copy as ``other``), "dma_dtype" (a copy between refs of two
    dtypes: a DMA moves bytes, it does not convert), "dma_shape" (a copy between
    windows of two shapes), "dma_shared_semaphore"
    (a wait on a semaphore that reads and writes signal together: either kind of copy
    landing could end it) or "dma_out_of_bounds" (a copy or wait that names a window
    past the ends of a ref, a semaphore's too)."""
    kind: str
    eqn: object                   # the wait, or the start
    other: object = None          # the other line involved: the earlier start still in
    #                               flight, the earlier wait, the copy of the other kind
    detail: str = ""              # dma_out_of_bounds: which window, of which shape


@dataclasses.dataclass
class _Copy:
    """A DMA in flight: started, not yet waited for."""
    sem: tuple            # (the semaphore ref, its box)
    window: tuple         # (src ref, src box, dst ref, dst box): the copy's descriptor
    into: str             # the destination's memory space: reads and writes differ
    owed: int             # bytes its semaphore still owes the waits
    eqn: object
    waited_by: object = None   # the wait that took its last bytes
    sender: int | None = None  # a remote copy landing here: the device that started it
    send: bool = False         # the sending side of a remote copy (its send semaphore)
    lands: object = None       # the ref its data lands in (on the target, for a send side)

    @property
    def dst(self):
        return self.window[2]

    @property
    def dst_box(self):
        return self.window[3]


def _window(refs) -> tuple:
    return (refs.src, refs.src_box, refs.dst, refs.dst_box)


class Ledger:
    """DMA starts and waits along one kernel run, matched per semaphore as a TPU does:
    a start adds its bytes to the semaphore when the copy lands, a wait takes the
    bytes of its own descriptor."""

    def __init__(self):
        self.in_flight: list[_Copy] = []
        self.landed: list[_Copy] = []   # copies waited for, the latest last
        self.waits: list[tuple] = []    # (window, semaphore, equation) of every wait
        self.problems: list[DmaProblem] = []
        self.most = 0
        self.followed = True

    def start(self, refs, eqn, into: str) -> None:
        if not self._follows(refs) or self._outside(refs, eqn):
            return
        self.problems += self._mismatched(refs, eqn)
        for copy in self.in_flight:
            if copy.dst is refs.dst and _overlap(copy.dst_box, refs.dst_box):
                self.problems.append(self._misnamed(copy) or
                                     DmaProblem("dma_overwrite", eqn, copy.eqn))
                break
        self.in_flight.append(_Copy((refs.sem, refs.sem_box), _window(refs), into,
                                    refs.nbytes, eqn, lands=refs.dst))
        self.most = max(self.most, len(self.in_flight))

    @staticmethod
    def _mismatched(refs, eqn) -> list:
        """A copy between refs of two dtypes, or windows of two shapes."""
        found = []
        dtypes = [getattr(getattr(r, "aval", None), "dtype", None) for r in (refs.src, refs.dst)]
        if None not in dtypes and dtypes[0] != dtypes[1]:
            found.append(DmaProblem("dma_dtype", eqn, detail=f"{dtypes[0]} -> {dtypes[1]}"))
        shapes = [_extent(box) for box in (refs.src_box, refs.dst_box)]
        if None not in shapes and shapes[0] != shapes[1]:
            found.append(DmaProblem("dma_shape", eqn, detail=(
                f"{_shown(refs.src_box)} -> {_shown(refs.dst_box)}")))
        return found

    def wait(self, refs, eqn, into: str) -> None:
        if not self._follows(refs) or self._outside(refs, eqn):
            return
        owed = refs.nbytes
        on_it = [c for c in self.in_flight if c.sem[0] is refs.sem and c.sem[1] == refs.sem_box]
        self.waits.append((_window(refs), (refs.sem, refs.sem_box), eqn))
        if not on_it:
            mine = [c for c in self.in_flight if _describes(refs, c.window)]
            if mine and None not in (refs.src_box, refs.dst_box):
                self.problems.append(DmaProblem("dma_wrong_semaphore", eqn, mine[0].eqn))
                return
        others = [c for c in on_it if c.into != into]
        if others:
            self.problems.append(DmaProblem("dma_shared_semaphore", eqn, others[0].eqn))
        for copy in on_it:
            taken = min(owed, copy.owed)
            copy.owed -= taken
            owed -= taken
            if not copy.owed:
                self.in_flight.remove(copy)
                copy.waited_by = eqn
                self.landed.append(copy)
                self._landed(copy)
            if not owed:
                return
        self.problems.append(self._unmatched(refs, eqn))

    def _unmatched(self, refs, eqn) -> DmaProblem:
        """The problem of a wait that finds too few bytes on its semaphore."""
        again = [c for c in self.landed if _describes(refs, c.window)
                 and None not in (refs.src_box, refs.dst_box)]
        if again:
            return DmaProblem("dma_waited_twice", eqn, again[-1].waited_by)
        return DmaProblem("dma_never_started", eqn)

    def _landed(self, copy) -> None:
        """A copy whose last bytes a wait took (MeshLedger: word from its sender)."""

    def landing(self, target, refs):
        """Where a remote copy lands: the destination ref on device ``target`` (a mesh's,
        MeshLedger); None here."""
        return None

    def until_landed(self, refs, eqn):
        """Before a DMA wait: the ``turns.Wait`` of a device whose copies have not all
        landed yet, for another device may still send them (MeshLedger); none here."""
        return ()

    def until_signalled(self, refs, eqn):
        """Before a semaphore_wait: the same, for signals (MeshLedger); none here."""
        return ()

    def signal(self, refs, eqn) -> None:
        """pl.semaphore_signal: followed on a mesh only (MeshLedger)."""

    def sem_wait(self, refs, eqn) -> None:
        """pl.semaphore_wait: followed on a mesh only (MeshLedger)."""

    def barrier(self):
        """pltpu.get_barrier_semaphore(): a ref on a mesh only (MeshLedger)."""
        return UNKNOWN

    def close(self, scope: list | None = None) -> None:
        """The end of the kernel run (``scope`` None) or of a run_scoped that allocated
        the refs in ``scope``: a copy still in flight on them was never waited."""
        if not self.followed:
            return
        left = [c for c in self.in_flight if scope is None
                or any(c.sem[0] is r or c.dst is r for r in scope)]
        self.problems += [self._misnamed(c) or DmaProblem("dma_not_waited", c.eqn)
                          for c in left]
        self.in_flight = [c for c in self.in_flight if c not in left]

    def _misnamed(self, copy) -> DmaProblem | None:
        """A copy left in flight because the wait that describes it named another
        semaphore: that wait is the line to blame, not the start."""
        for window, sem, eqn in self.waits:
            if window == copy.window and None not in (window[1], window[3]) \
                    and (sem[0] is not copy.sem[0] or sem[1] != copy.sem[1]):
                return DmaProblem("dma_wrong_semaphore", eqn, copy.eqn)
        return None

    def _outside(self, refs, eqn) -> bool:
        if refs.outside:
            self.problems.append(DmaProblem("dma_out_of_bounds", eqn, detail=refs.outside))
        return bool(refs.outside)

    def _follows(self, refs) -> bool:
        """Whether the ledger can follow this copy: a local copy on a semaphore it knows.
        Once it cannot, it stops (a copy it missed could match any later wait)."""
        if self.followed and (refs.remote or refs.sem_box is None
                              or not isinstance(refs.sem, _Ref)):
            self.followed = False
            self.in_flight = []
        return self.followed


def _describes(refs, window) -> bool:
    """Whether a wait's descriptor names this copy's window (a remote copy's send side
    is waited with source and destination swapped)."""
    mine = _window(refs)
    return window == mine or window == (mine[2], mine[3], mine[0], mine[1])


def _extent(box) -> tuple | None:
    """The shape of a window, dims of size 1 left out (an index squeezes them)."""
    return None if box is None else tuple(hi - lo for lo, hi in box if hi - lo != 1)


def _shown(box) -> str:
    return "(" + ", ".join(str(hi - lo) for lo, hi in box) + ")"


def _overlap(a, b) -> bool:
    """Whether two boxes share an element (False when either is unknown: no guess)."""
    if a is None or b is None or len(a) != len(b):
        return False
    return all(lo1 < hi2 and lo2 < hi1 for (lo1, hi1), (lo2, hi2) in zip(a, b))


class _Ref:
    """A ref during the walk: its value where known (scalar-prefetch operands, or a
    small integer scratch the kernel filled with known values), its aval, and which
    operand of the kernel it is (None: scratch, or a run_scoped buffer)."""

    def __init__(self, value=UNKNOWN, aval=None, operand=None, marks=NONE, mark=None):
        self.value, self.aval, self.operand = value, aval, operand
        self.marks = marks   # the dot runs and refs its contents were computed from (Uses)
        self.mark = mark     # its own mark, once something loaded from it (Uses.mark_of)
        self.written = False   # a store or a copy reached it (a scratch read before: garbage)


_TRACKED = 4096   # an integer scratch of at most this many elements is followed once written


def _zeros(value) -> bool:
    """Whether a walked value is known to be all zeros (a product with it is zero)."""
    if isinstance(value, (_Unknown, _Ref)):
        return False
    try:
        return not np.any(value)
    except (TypeError, ValueError):
        return False


def _exact_cast(eqn) -> bool:
    """A cast that keeps every value: float to a float as wide or wider."""
    source, target = eqn.invars[0].aval.dtype, eqn.outvars[0].aval.dtype
    import jax.numpy as jnp
    return (jnp.issubdtype(source, jnp.floating) and jnp.issubdtype(target, jnp.floating)
            and jnp.dtype(target).itemsize >= jnp.dtype(source).itemsize)


def _scalar_literal(v) -> bool:
    return jaxcompat.is_literal(v) and np.ndim(v.val) == 0


def _whole(index, shape) -> bool:
    """Whether an index (``jaxcompat.ref_indices``) names every element of a ref."""
    if index is None or shape is None:
        return False
    if len(index) < len(shape):
        index = (*index, *(slice(0, n, 1) for n in shape[len(index):]))
    return all(isinstance(i, slice) and i.start == 0 and i.stop >= n and (i.step or 1) == 1
               for i, n in zip(index, shape))


def _copy_marks(uses, src, dst) -> None:
    """A DMA's destination holds, from now on, what its source was computed from too."""
    if isinstance(dst, _Ref):
        dst.written = True
    if isinstance(src, _Ref) and isinstance(dst, _Ref):
        marks = src.marks | {uses.mark_of(src)}
        dst.marks = dst.marks | marks
        uses.store(dst, marks)


def _fresh(var, operand=None) -> _Ref:
    """The ref a kernel operand or a run_scoped allocation starts as: value unknown."""
    return _Ref(aval=getattr(var, "aval", None), operand=operand)


# Bookkeeping, not work: what overlap does not count.
# Work of the transcendental unit (the EUP on a TPU), not of the VPU's ALUs.
TRANSCENDENTAL = frozenset({"exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic",
                            "sin", "cos", "tan", "rsqrt", "sqrt", "cbrt", "erf", "erfc",
                            "erf_inv", "pow", "atan2", "asin", "acos", "atan", "sinh",
                            "cosh", "asinh", "acosh", "atanh", "lgamma", "digamma"})

_NOT_WORK = frozenset({"get", "swap", "addupdate", "dma_start", "dma_wait", "program_id",
                       "num_programs", "cond", "while", "scan", "run_scoped", "pjit",
                       "closed_call", "jit", "semaphore_signal", "semaphore_wait",
                       "semaphore_read", "axis_index", "get_barrier_semaphore",
                       "iota", "broadcast_in_dim", "reshape", "squeeze",
                       "expand_dims", "convert_element_type", "multiple_of"})


def _trunc_div(a, b):
    """lax.div: rounds toward zero for integers, plain division for floats."""
    kind = np.result_type(a, b)
    quotient = np.true_divide(a, b)
    return np.trunc(quotient).astype(kind) if np.issubdtype(kind, np.integer) else quotient


def _bitwise(op_bool, op_int):
    def apply(*xs):
        return (op_bool if all(np.asarray(x).dtype == bool for x in xs) else op_int)(*xs)
    return apply


_NUMPY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _trunc_div,
    "rem": np.fmod, "max": np.maximum, "min": np.minimum, "neg": np.negative,
    "abs": np.abs, "sign": np.sign, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal,
    "and": _bitwise(np.logical_and, np.bitwise_and), "or": _bitwise(np.logical_or, np.bitwise_or),
    "not": _bitwise(np.logical_not, np.invert), "xor": np.bitwise_xor,
    "shift_left": np.left_shift, "shift_right_arithmetic": np.right_shift,
    "select_n": lambda which, *cases: np.choose(np.asarray(which, np.int64), cases),
    "clamp": lambda lo, x, hi: np.clip(x, lo, hi),
}
_SAME_VALUE = {"squeeze", "reshape", "expand_dims", "copy", "copy_p", "multiple_of",
               "optimization_barrier", "pvary"}


def _apply(eqn, values):
    """The outputs of a plain equation whose inputs are all known, or None."""
    name = eqn.primitive.name
    out_aval = eqn.outvars[0].aval if eqn.outvars else None
    if name in _NUMPY:
        out = _NUMPY[name](*values)
    elif name in _SAME_VALUE and len(values) >= 1:
        out = values[0]
        shape = getattr(out_aval, "shape", None)
        if shape is not None and np.size(out) == int(np.prod(shape)):
            out = np.reshape(out, shape)
    else:
        out = jaxcompat.evaluated(eqn, values, np)
        if out is None:
            return None
    return [out]


class Walk:
    """Walks jaxprs with known and unknown values, counting what a kernel does."""

    def __init__(self, grid=(), point=(), counts: Counts | None = None,
                 ledger: Ledger | None = None, place: dict | None = None,
                 uses: Uses | None = None):
        self.grid, self.point = grid, point
        self.counts = counts if counts is not None else Counts()
        self.ledger = ledger if ledger is not None else Ledger()
        self.place = place or {}   # on a mesh: axis name -> (this device's index, size)
        self.uses = uses if uses is not None else self.counts.uses

    @property
    def _marks(self) -> dict:
        """This device's marks of jaxpr variables (Uses.marks)."""
        return self.uses.marks.setdefault(self.counts.device, {})

    def run(self, jaxpr, consts, args, marks=()) -> list:
        """``jaxpr``'s outputs, walked where nothing waits for another device."""
        return finished(self.taking_turns(jaxpr, consts, args, marks))

    def taking_turns(self, jaxpr, consts, args, marks=(), const_marks=()):
        """Walks ``jaxpr`` (a generator: on a mesh, it yields a ``Wait`` where the device
        waits for another, see ``turns``) and returns its outputs. ``marks``,
        ``const_marks``: the dot runs each input and constant was computed from (Uses);
        its outputs' are ``self.marks_of(jaxpr.outvars)`` after."""
        env = {}
        known = self._marks

        def read(v):
            return v.val if jaxcompat.is_literal(v) else env.get(v, UNKNOWN)

        for n, (var, value) in enumerate(zip(jaxpr.constvars, consts)):
            env[var] = value
            known[var] = const_marks[n] if n < len(const_marks) else NONE
        for n, (var, value) in enumerate(zip(jaxpr.invars, args)):
            env[var] = value
            known[var] = marks[n] if n < len(marks) else NONE
        outer = products.outer_muls(jaxpr)
        for eqn in jaxpr.eqns:
            values = [read(v) for v in eqn.invars]
            if outer and id(eqn) in outer:
                self.counts.outer += _elements(eqn.outvars[0])
            outs = self.equation(eqn, values)
            if isinstance(outs, types.GeneratorType):   # control flow, or a wait
                outs = yield from outs
            else:
                self._mark(eqn, values)
            for var, value in zip(eqn.outvars, outs):
                env[var] = value
        return [read(v) for v in jaxpr.outvars]

    def _landing(self, remote: bool = False) -> tuple:
        """The refs the copies in flight land in (on this device or another); ``remote``:
        of the copies between devices only (sent from here, or landing here)."""
        return tuple(copy.lands for copy in self.ledger.in_flight if copy.lands is not None
                     and (not remote or copy.send or copy.sender is not None))

    # -- which dots' results each value was computed from (Uses)
    def marks_of(self, variables) -> list:
        known = self._marks
        return [NONE if jaxcompat.is_literal(v) else known.get(v, NONE) for v in variables]

    def _set_marks(self, variables, marks) -> None:
        for var, found in zip(variables, marks):
            self._marks[var] = found

    def _mark(self, eqn, values) -> None:
        """The marks of a plain equation's outputs: the runs its inputs were computed from
        (a ref's contents, for a load), none through a product with a known zero, only the
        picked cases' through a select whose predicate is known; a store marks its ref."""
        name = eqn.primitive.name
        ins = self.marks_of(eqn.invars)
        if name in ("get", "swap", "addupdate") and isinstance(values[0], _Ref):
            ref = values[0]
            old = ref.marks.union(*ins[2 if name != "get" else 1:]) | {self.uses.mark_of(ref)}
            if name != "get":
                self.uses.store(ref, ins[1])
            if name == "addupdate":
                ref.marks = ref.marks | ins[1]
            elif name == "swap":
                whole = _whole(jaxcompat.ref_indices(eqn, values, UNKNOWN),
                               getattr(ref.aval, "shape", None))
                ref.marks = ins[1] if whole else ref.marks | ins[1]
            self._set_marks(eqn.outvars, [old] * len(eqn.outvars))
            return
        out = NONE.union(*ins)
        terms = self._terms(eqn)
        if terms is not None:   # a sum of values: only those whose coefficients are left
            known = self._marks
            out = NONE.union(*(known.get(v, NONE) for v in terms))
        if name == "dot_general":
            out = out | {self._dot_run}
        if name in ("dot_general", "mul") and any(_zeros(v) for v in values):
            out = NONE   # times a known zero: nothing of it is left
        elif name in ("sub", "xor") and len(eqn.invars) == 2 \
                and eqn.invars[0] is eqn.invars[1] and not jaxcompat.is_literal(eqn.invars[0]):
            out = NONE   # x - x: zero, whatever x was
        elif name == "select_n" and not isinstance(values[0], (_Unknown, _Ref)):
            picked = {int(k) for k in np.unique(np.asarray(values[0], np.int64))}
            out = NONE.union(*(ins[1 + k] for k in picked if 0 <= k < len(ins) - 1))
        self._set_marks(eqn.outvars, [out] * len(eqn.outvars))

    def _terms(self, eqn) -> dict | None:
        """``eqn``'s output as a sum of other variables' values with their coefficients
        (Uses.terms), for add, sub, neg, an exact cast (a float widened: x - x.astype(bf16)
        is a rounding error, not zero) and a product with a constant scalar;
        None for any other equation. A variable no sum made is its own term; a literal
        term is a constant, computed from nothing."""
        name, invars = eqn.primitive.name, eqn.invars
        known = self.uses.terms.setdefault(self.counts.device, {})

        def terms_of(v):
            return {} if jaxcompat.is_literal(v) else known.get(v, {v: 1.0})

        if name in ("add", "add_any", "sub") and len(invars) == 2:
            sign = -1.0 if name == "sub" else 1.0
            out = dict(terms_of(invars[0]))
            for v, c in terms_of(invars[1]).items():
                out[v] = out.get(v, 0.0) + sign * c
        elif name in ("neg", "copy", "copy_p") or (name == "convert_element_type"
                                                   and _exact_cast(eqn)):
            scale = -1.0 if name == "neg" else 1.0
            out = {v: scale * c for v, c in terms_of(invars[0]).items()}
        elif name == "mul" and len(invars) == 2 and any(map(_scalar_literal, invars)):
            factor = float(next(v.val for v in invars if _scalar_literal(v)))
            other = next(v for v in invars if not _scalar_literal(v)) \
                if not all(map(_scalar_literal, invars)) else None
            out = {v: factor * c for v, c in terms_of(other).items()} if other else {}
        else:
            return None
        out = {v: c for v, c in out.items() if c != 0.0}
        if len(out) > 16:   # too long a sum to follow: a term of its own
            return None
        known[eqn.outvars[0]] = out
        return out

    def equation(self, eqn, values):
        """The outputs of ``eqn``: a list, or, for control flow and waits, a generator
        that returns them (``taking_turns``)."""
        name = eqn.primitive.name
        unknown = [UNKNOWN] * len(eqn.outvars)
        view = jaxcompat.control(eqn)
        if name not in _NOT_WORK and not isinstance(view, jaxcompat.Inline):
            executed, overlapped = self.counts.executed, self.counts.overlapped
            executed[name] = executed.get(name, 0) + 1
            if self.ledger.in_flight:
                overlapped[name] = overlapped.get(name, 0) + 1
                self.counts.during.setdefault(name, []).append(self._landing())
            if name != "dot_general" and eqn.outvars:
                self.counts.elementwise += _elements(eqn.outvars[0])
                if name in TRANSCENDENTAL:
                    self.counts.transcendental += _elements(eqn.outvars[0])
        if name == "program_id":
            return [np.int32(self.point[jaxcompat.grid_axis(eqn)])]
        if name == "num_programs":
            return [np.int32(self.grid[jaxcompat.grid_axis(eqn)])]
        if name == "axis_index":
            return [self.axis_index(jaxcompat.mesh_axes(eqn))]
        if name == "get_barrier_semaphore":
            return [self.ledger.barrier()]
        if name == "semaphore_signal":
            self.ledger.signal(jaxcompat.semaphore_refs(eqn, values, UNKNOWN), eqn)
            return unknown
        if name == "semaphore_wait":
            return self._sem_wait(jaxcompat.semaphore_refs(eqn, values, UNKNOWN), eqn)
        if name in ("get", "swap", "addupdate"):
            return self.ref_access(eqn, values) if isinstance(values[0], _Ref) else unknown
        if name == "dot_general":
            flops, dtype = _dot_flops(eqn), str(eqn.invars[0].aval.dtype)
            self.counts.flops += flops
            self.counts.dot_flops[dtype] = self.counts.dot_flops.get(dtype, 0) + flops
            self._dot_run = self.uses.run(flops, self.counts.device, self._landing(), eqn,
                                          self._landing(remote=True))
            if not all(any(m < 0 for m in marks) for marks in self.marks_of(eqn.invars[:2])):
                self.uses.constant.add(self._dot_run)
            key = jaxcompat.dot_shape(eqn)
            self.counts.dots[key] = self.counts.dots.get(key, 0) + 1
            return unknown
        if name == "dma_start":
            copy = jaxcompat.dma_copy(eqn)
            refs = jaxcompat.dma_refs(eqn, values, UNKNOWN)
            if refs.remote:   # chip to chip: not HBM <-> VMEM traffic, counted apart
                target = self.ledger.start(refs, eqn, into=copy[1])
                _copy_marks(self.uses, refs.src, self.ledger.landing(target, refs))
                self.counts.remote.append((target, copy[2], getattr(refs.src, "operand", None),
                                           getattr(refs.dst, "operand", None)))
                return unknown
            _copy_marks(self.uses, refs.src, refs.dst)
            self.counts.dmas.append(copy)
            self.counts.dma_operands.append((getattr(refs.src, "operand", None),
                                             getattr(refs.dst, "operand", None), copy[2]))
            self.counts.dma_windows.append((getattr(refs.src, "operand", None), refs.src_box,
                                            getattr(refs.dst, "operand", None), refs.dst_box))
            if getattr(refs.dst, "operand", None) is not None:
                self.counts.stores.add((self.point, refs.dst.operand))
            self.ledger.start(refs, eqn, into=copy[1])
            return unknown
        if name == "dma_wait":
            return self._dma_wait(jaxcompat.dma_refs(eqn, values, UNKNOWN), eqn)
        if isinstance(view, jaxcompat.Branches):
            return _cond(self, view, eqn, values)
        if isinstance(view, jaxcompat.Loop):
            return _loop(self, view, eqn, values)
        if isinstance(view, jaxcompat.Scoped):
            return self._scoped(view, eqn, values)
        if isinstance(view, jaxcompat.Inline):
            return self._inline(view, eqn, values)
        if not any(v is UNKNOWN or isinstance(v, _Ref) for v in values):
            try:
                with np.errstate(all="ignore"):  # a 0 / 0 of known values is still a value
                    out = _apply(eqn, values)
            except (TypeError, ValueError, IndexError):
                out = None
            if out is not None:
                return out
        for jaxpr, _ in jaxcompat.parts(eqn):
            if _counts_anything(jaxpr):
                raise Uncountable(f"a {name} whose body the kit cannot follow")
        return unknown

    def _dma_wait(self, refs, eqn):
        yield from self.ledger.until_landed(refs, eqn)
        self.ledger.wait(refs, eqn, into=jaxcompat.dma_copy(eqn)[1])
        return [UNKNOWN] * len(eqn.outvars)

    def _sem_wait(self, refs, eqn):
        yield from self.ledger.until_signalled(refs, eqn)
        self.ledger.sem_wait(refs, eqn)
        return [UNKNOWN] * len(eqn.outvars)

    def _scoped(self, view, eqn, values):
        jaxpr, _ = view.body
        scope = [_fresh(var) for var in jaxpr.invars]
        yield from self.taking_turns(jaxpr, values, scope,
                                     const_marks=self.marks_of(eqn.invars))
        self.ledger.close(scope)
        self._set_marks(eqn.outvars, self.marks_of(jaxpr.outvars))
        return [UNKNOWN] * len(eqn.outvars)

    def _inline(self, view, eqn, values):
        jaxpr, consts = view.body
        outs = yield from self.taking_turns(jaxpr, consts, values, self.marks_of(eqn.invars))
        self._set_marks(eqn.outvars, self.marks_of(jaxpr.outvars))
        return outs

    def axis_index(self, names: tuple):
        """This device's index along mesh axes ``names`` (row-major over several)."""
        if not all(n in self.place for n in names):
            return UNKNOWN
        index = 0
        for n in names:
            index = index * self.place[n][1] + self.place[n][0]
        return np.int32(index)

    def ref_access(self, eqn, values):
        ref, name = values[0], eqn.primitive.name
        index = jaxcompat.ref_indices(eqn, values, UNKNOWN)
        past = _past_the_end(index, getattr(ref.aval, "shape", None))
        if past:
            self.counts.outside.append((eqn, past))
        if index is not None and ref.value is not UNKNOWN:
            try:
                np.asarray(ref.value)[index]
            except IndexError:   # past the end: the run itself says so; here, unknown
                index = None
        known = ref.value is not UNKNOWN and index is not None
        old = np.asarray(ref.value)[index] if known else UNKNOWN
        if name == "get":
            if ref.operand is not None:
                self.counts.loads.add((self.point, ref.operand))
            elif not ref.written and ref.value is UNKNOWN:   # a scratch nothing wrote yet
                ref.written = True   # told once
                self.counts.unset_reads.append((self.point, eqn))
            return [old]
        ref.written = True
        if ref.operand is None and name == "swap" and values[1] is not UNKNOWN \
                and _whole(index, getattr(ref.aval, "shape", None)):
            self.counts.resets.append((self.point, eqn))
        if ref.operand is not None:
            self.counts.stores.add((self.point, ref.operand))
        new = values[1]
        if not known and name == "swap" and new is not UNKNOWN and index is not None:
            ref.value = _filled(ref, index, new)   # known once written all at once
        elif not known or new is UNKNOWN:
            ref.value = UNKNOWN
        else:
            array = np.array(ref.value)
            array[index] = (old + new) if name == "addupdate" else new
            ref.value = array
        return [old] if name == "swap" else []

def _cond(outer: Walk, view: jaxcompat.Branches, eqn, values):
    """A cond (pl.when): the branch its known condition picks; on an unknown one,
    every branch, which must then agree on the work and the copies."""
    which, operands = view.split(values)
    marks = outer.marks_of(eqn.invars[1:])
    if which is not UNKNOWN:
        jaxpr, consts = view.picked(which)
        outs = yield from outer.taking_turns(jaxpr, consts, operands, marks)
        outer._set_marks(eqn.outvars, outer.marks_of(jaxpr.outvars))
        return outs
    if any(_moves_data(jaxpr) for jaxpr, _ in view.programs):
        raise Uncountable("a pl.when or lax.cond whose condition depends on data the "
                          "kernel loaded, with a DMA start or wait inside")
    counted, written, ran, busiest, dots, shapes, eup = [], [], {}, 0, {}, {}, 0
    products_done = 0
    out_marks = [NONE] * len(eqn.outvars)
    for number, (jaxpr, consts) in enumerate(view.programs):
        walk = Walk(outer.grid, outer.point, Counts(device=outer.counts.device),
                    place=outer.place, uses=outer.uses)
        copies = [_Ref(v.value, v.aval, v.operand, v.marks, outer.uses.mark_of(v))
                  if isinstance(v, _Ref) else v for v in operands]
        first_run = len(outer.uses.flops)
        walk.run(jaxpr, consts, copies, marks)
        if number:   # another branch's dots stand in place of the first's: counted once
            for run in range(first_run, len(outer.uses.flops)):
                outer.uses.flops[run] = 0
        out_marks = [a | b for a, b in zip(out_marks, walk.marks_of(jaxpr.outvars))]
        outer.counts.stores |= walk.counts.stores   # a store that may run: made
        outer.counts.loads |= walk.counts.loads
        counted.append((walk.counts.flops, sorted(walk.counts.dmas)))
        written.append(copies)
        if walk.counts.elementwise >= busiest:
            busiest, eup = walk.counts.elementwise, walk.counts.transcendental
        products_done = max(products_done, walk.counts.outer)
        dots = walk.counts.dot_flops or dots
        shapes = walk.counts.dots or shapes
        for name, times in walk.counts.executed.items():   # the busier branch
            ran[name] = max(ran.get(name, 0), times)
    for name, times in ran.items():
        outer.counts.executed[name] = outer.counts.executed.get(name, 0) + times
        if outer.ledger.in_flight:
            outer.counts.overlapped[name] = outer.counts.overlapped.get(name, 0) + times
            outer.counts.during.setdefault(name, []).extend([outer._landing()] * times)
    if any(c != counted[0] for c in counted):
        raise Uncountable("a pl.when or lax.cond whose condition depends on data the "
                          "kernel loaded, with dots or DMAs inside")
    outer.counts.flops += counted[0][0]
    outer.counts.elementwise += busiest
    outer.counts.transcendental += eup
    outer.counts.outer += products_done
    for dtype, flops in dots.items():
        outer.counts.dot_flops[dtype] = outer.counts.dot_flops.get(dtype, 0) + flops
    for key, times in shapes.items():
        outer.counts.dots[key] = outer.counts.dots.get(key, 0) + times
    outer.counts.dmas += counted[0][1]
    for n, ref in enumerate(operands):   # a ref is known after the branch only if
        if isinstance(ref, _Ref):        # every branch leaves it the same
            after = [copies[n].value for copies in written]
            same = all(_same(a, after[0]) for a in after)
            ref.value = after[0] if same else UNKNOWN
            ref.marks = NONE.union(*(copies[n].marks for copies in written))
    outer._set_marks(eqn.outvars, out_marks)
    return [UNKNOWN] * len(eqn.outvars)


def _loop(outer: Walk, view: jaxcompat.Loop, eqn, values):
    """A scan (fori_loop with static bounds): every iteration, in order. A while loop
    (fori_loop with a traced bound): run while its condition is known. The marks of the
    carry go round with it (Uses)."""
    cond_consts, consts, carry, xs = view.split(values)
    cond_marks, const_marks, carry_marks, xs_marks = view.split(outer.marks_of(eqn.invars))
    body, body_consts = view.body
    if view.kind == "scan":
        ys = [NONE] * (len(eqn.outvars) - view.num_carry)
        for i in view.iterations():
            x = [UNKNOWN if v is UNKNOWN else np.asarray(v)[i] for v in xs]
            carry = (yield from outer.taking_turns(body, body_consts, [*consts, *carry, *x],
                                                   [*const_marks, *carry_marks, *xs_marks])
                     )[:view.num_carry]
            done = outer.marks_of(body.outvars)
            carry_marks = done[:view.num_carry]
            ys = [a | b for a, b in zip(ys, done[view.num_carry:])]
        outer._set_marks(eqn.outvars, [*carry_marks, *ys])
        return list(carry) + [UNKNOWN] * (len(eqn.outvars) - view.num_carry)
    cond, cond_c = view.cond
    for _ in range(1 << 20):
        go = (yield from outer.taking_turns(cond, cond_c, [*cond_consts, *carry],
                                            [*cond_marks, *carry_marks]))[0]
        if go is UNKNOWN:
            if not _counts_anything(body):
                outer._set_marks(eqn.outvars, carry_marks)
                return [UNKNOWN] * len(eqn.outvars)
            raise Uncountable("a loop whose bound depends on data the kernel loaded")
        if not bool(go):
            outer._set_marks(eqn.outvars, carry_marks)
            return carry
        carry = yield from outer.taking_turns(body, body_consts, [*consts, *carry],
                                              [*const_marks, *carry_marks])
        carry_marks = outer.marks_of(body.outvars)
    raise Uncountable("a loop that ran more than a million times")


def _past_the_end(index, shape) -> str:
    """What part of a ref of ``shape`` that ``index`` names lies past its ends ("" when
    none, or when the index is not known): negative indices do not wrap in a kernel."""
    if index is None or shape is None or len(index) > len(shape):
        return ""
    for dim, (i, size) in enumerate(zip(index, shape)):
        if isinstance(i, slice):
            lo, hi = i.start, i.stop
        else:
            values = np.asarray(i)
            if values.size == 0 or not np.issubdtype(values.dtype, np.integer):
                continue
            lo, hi = int(values.min()), int(values.max()) + 1
        if lo < 0 or hi > size:
            shown = f"{lo}:{hi}" if isinstance(i, slice) or hi - lo > 1 else f"{lo}"
            return f"index {shown} along dim {dim}, which has {size}"
    return ""


def _same(a, b) -> bool:
    if a is UNKNOWN or b is UNKNOWN:
        return a is b
    return np.array_equal(np.asarray(a), np.asarray(b))


def _filled(ref, index, new):
    """The value of a small integer ref whose every element ``new`` writes at ``index``;
    UNKNOWN if the write leaves some element unknown (or the ref is not small)."""
    shape, dtype = getattr(ref.aval, "shape", None), getattr(ref.aval, "dtype", None)
    try:
        if shape is None or not np.issubdtype(np.dtype(dtype), np.integer) \
                or int(np.prod(shape, dtype=np.int64)) > _TRACKED:
            return UNKNOWN
        covered = np.zeros(shape, bool)
        covered[index] = True
        if not covered.all():
            return UNKNOWN
        array = np.zeros(shape, np.dtype(dtype))
        array[index] = new
    except (TypeError, ValueError, IndexError):
        return UNKNOWN
    return array


def _elements(var) -> int:
    shape = getattr(getattr(var, "aval", None), "shape", None)
    return int(np.prod(shape, dtype=np.int64)) if shape is not None else 0


def _dot_flops(eqn) -> int:
    contract = jaxcompat.contracting_dims(eqn)
    lhs = eqn.invars[0].aval.shape
    out = eqn.outvars[0].aval.shape
    k = int(np.prod([lhs[d] for d in contract], dtype=np.int64))
    return 2 * int(np.prod(out, dtype=np.int64)) * k


def _counts_anything(jaxpr, names=("dot_general", "dma_start", "dma_wait")) -> bool:
    return any(eqn.primitive.name in names for eqn in jaxcompat.equations(jaxpr))


def _moves_data(jaxpr) -> bool:
    """Whether a jaxpr starts or waits for a DMA, anywhere inside."""
    return _counts_anything(jaxpr, ("dma_start", "dma_wait"))


def has_dmas(call) -> bool:
    """Whether a kernel starts or waits for DMAs of its own."""
    return _moves_data(call.kernel)


# ------------------------------------------------------------ index maps ---

def index_maps(block, steps: np.ndarray, prefetch: list) -> np.ndarray:
    """The block indices ``block``'s index map returns at every grid step: an array
    [steps, dims]. ``steps`` is [steps, grid rank]; ``prefetch`` the scalar-prefetch
    values."""
    jaxpr, consts = block.index_map
    columns = [steps[:, i].astype(np.int32) for i in range(steps.shape[1])]
    refs = [_Ref(np.asarray(v)) for v in prefetch]
    walk = Walk()
    outputs = walk.run(jaxpr, consts, columns + refs)
    if any(o is UNKNOWN for o in outputs):
        raise Uncountable(f"the index map of {block.name} uses something the kit cannot "
                          "evaluate")
    return np.stack([np.broadcast_to(np.asarray(o, np.int64), len(steps)) for o in outputs],
                    axis=1)


def grid_steps(grid) -> np.ndarray:
    """Every grid point in the order the grid runs (the last axis fastest)."""
    if not grid:
        return np.zeros((1, 0), np.int64)
    return np.indices(grid).reshape(len(grid), -1).T


def kernel_counts(call, prefetch: list) -> Counts:
    """What ``call``'s kernel does over its whole grid: flops, DMAs and the DMA ledger.
    The refs live as long as the kernel run, as on a TPU: a scalar-prefetch value the
    kernel overwrites, or a copy started at one grid step and waited at the next, is
    seen as such."""
    counts, ledger = Counts(), Ledger()
    jaxpr = call.kernel
    args = [_Ref(np.array(v), getattr(var, "aval", None), operand=n)
            for n, (v, var) in enumerate(zip(prefetch, jaxpr.invars))]
    args += [_fresh(var, n if n < len(prefetch) + len(call.blocks) else None)
             for n, var in enumerate(jaxpr.invars[len(prefetch):], len(prefetch))]
    outputs = [args[n] for n in call.output_refs if n < len(args)]
    for point in grid_steps(call.grid):
        before = counts.flops
        walk = Walk(call.grid, tuple(int(p) for p in point), counts, ledger)
        walk.run(jaxpr, [], args)
        counts.step_flops.append(counts.flops - before)
        counts.uses.reach(outputs)   # written back at the end of the step
    ledger.close()
    counts.most_in_flight, counts.dma_problems = ledger.most, ledger.problems
    counts.dmas_followed = ledger.followed
    return counts


# ------------------------------------------------------- a projection ---

PROJECT_MOST = 1 << 16   # grid steps walked to project a kernel at a TPU's size


def projected_counts(call, prefetch: list) -> tuple[Counts, int]:
    """What ``call``'s kernel does over its whole grid, at sizes too large to walk every
    step: the steps of the grid axes its control flow depends on (``decisive_axes``) are
    walked, with the other axes at 0, and the counts multiplied by the steps left out.
    Returns (the counts, the grid's steps). The DMA ledger is not judged here."""
    grid = tuple(call.grid)
    decisive = decisive_axes(call)
    walked = tuple(g if a in decisive else 1 for a, g in enumerate(grid))
    times = int(np.prod([g for a, g in enumerate(grid) if a not in decisive] or [1]))
    steps = grid_steps(walked)
    if len(steps) > PROJECT_MOST:
        raise Uncountable(f"{len(steps)} grid steps whose work differs, too many to walk")
    counts, ledger = Counts(), Ledger()
    jaxpr = call.kernel
    args = [_Ref(np.array(v), getattr(var, "aval", None), operand=n)
            for n, (v, var) in enumerate(zip(prefetch, jaxpr.invars))]
    args += [_fresh(var, None) for var in jaxpr.invars[len(prefetch):]]
    for point in steps:
        Walk(grid, tuple(int(p) for p in point), counts, ledger).run(jaxpr, [], args)
    if times > 1:
        counts.flops *= times
        counts.elementwise *= times
        counts.transcendental *= times
        counts.outer *= times
        counts.dot_flops = {k: v * times for k, v in counts.dot_flops.items()}
        counts.dots = {k: v * times for k, v in counts.dots.items()}
        counts.dmas = [(a, b, n * times) for a, b, n in counts.dmas]
    return counts, int(np.prod(grid or (1,)))


def decisive_axes(call) -> set[int]:
    """The grid axes that a decision of ``call``'s kernel depends on: a ``pl.when``'s
    condition, a loop's bound (through values, refs stored and read, and prefetched
    scalars indexed by them). The work of two steps that differ only on the other axes
    is the same. Found by following each ``program_id`` through the program."""
    decisive: set[int] = set()
    stored: dict = {}     # a ref (the variable it was passed as at the top) -> axes
    alias: dict = {}

    def root(var):
        while var in alias:
            var = alias[var]
        return var

    def taint(env, var):
        if jaxcompat.is_literal(var):
            return frozenset()
        return env.get(var, frozenset()) | stored.get(root(var), frozenset())

    def follow(jaxpr, inputs: list, outer_vars: list, closed=((), ())) -> list:
        env = dict(zip(jaxpr.invars, inputs))
        env.update(zip(jaxpr.constvars, closed[0]))
        for inner, outer in [*zip(jaxpr.invars, outer_vars), *zip(jaxpr.constvars, closed[1])]:
            if outer is not None and not jaxcompat.is_literal(outer):
                alias[inner] = outer
        for eqn in jaxpr.eqns:
            ins = [taint(env, v) for v in eqn.invars]
            every = frozenset().union(*ins) if ins else frozenset()
            name, view = eqn.primitive.name, jaxcompat.control(eqn)
            outs = [every] * len(eqn.outvars)
            if name == "program_id":
                outs = [frozenset({jaxcompat.grid_axis(eqn)})]
            elif name in ("swap", "addupdate"):
                key = root(eqn.invars[0])
                stored[key] = stored.get(key, frozenset()) | every
            elif isinstance(view, jaxcompat.Branches):
                which, operands = view.split(ins)
                _, operand_vars = view.split(list(eqn.invars))
                decisive.update(which)
                found = [follow(j, operands, operand_vars) for j, _ in view.programs]
                outs = [which.union(*column) for column in zip(*found)] or outs
            elif isinstance(view, jaxcompat.Loop):
                body, _ = view.body
                operand_vars = view.body_operands(list(eqn.invars))
                operands = view.body_operands(ins)
                for _ in range(2):   # a carry fed back: twice reaches what it can
                    carried = follow(body, operands, operand_vars)
                    _, consts, carry, xs = view.split(ins)
                    carry = [a | b for a, b in zip(carry, carried[:view.num_carry])]
                    operands = [*consts, *carry, *xs]
                if view.kind != "scan":
                    cond_consts, _, _, _ = view.split(ins)
                    decisive.update(frozenset().union(*cond_consts, *carry))
                outs = carry + [every] * (len(eqn.outvars) - len(carry))
            elif isinstance(view, (jaxcompat.Scoped, jaxcompat.Inline)):
                body, _ = view.body
                if isinstance(view, jaxcompat.Scoped):
                    follow(body, [frozenset()] * len(body.invars), [None] * len(body.invars),
                           (ins, list(eqn.invars)))
                else:
                    outs = follow(body, ins, list(eqn.invars)) or outs
            else:
                for inner, _ in jaxcompat.parts(eqn):   # anything else: all of it decides
                    decisive.update(every)
            for var, value in zip(eqn.outvars, outs):
                env[var] = value
        return [taint(env, v) for v in jaxpr.outvars]

    jaxpr = call.kernel
    for _ in range(2):   # a ref stored at one step and read at a later one
        follow(jaxpr, [frozenset()] * len(jaxpr.invars), [None] * len(jaxpr.invars))
    return decisive


# ------------------------------------------------------------------- a mesh ---

class MeshLedger(Ledger):
    """The DMA ledger of one device of a mesh, walked beside the others (``MeshWalk``).

    A remote copy is two copies in flight: its sending side on this device's send
    semaphore, its landing side on the target's receive semaphore (waited there). A
    wait that finds too few bytes, or a semaphore_wait too few signals, hands the turn
    to another device, which may still send them; when every device is waiting, the
    waits are named (a TPU would hang). Words from another device (a copy that landed
    here, a signal) are remembered: a copy into a device that has not said it is in
    the kernel (the barrier), or a second copy into it on the same receive semaphore
    or window before it has said anything since the first, is named."""

    def __init__(self, run: "MeshWalk", device: int):
        super().__init__()
        self.run, self.device = run, device
        self.problems = run.problems       # one list for the mesh, in the order they happen
        self.heard = [0] * run.count       # words from each device, so far
        self.counts: dict = {}             # (semaphore key, box) -> [[sender, amount, eqn]]
        self.sent: list = []               # (target, sem, dst key, dst box, heard, eqn, send sem)
        self.own_barrier = _Ref(operand="barrier")

    # -- what the walk calls
    def barrier(self):
        return self.own_barrier

    def start(self, refs, eqn, into: str):
        if not refs.remote:
            return super().start(refs, eqn, into)
        target = self.run.target(self.device, refs)
        keys = [self.run.key(self.device, r) for r in (refs.dst, refs.sem, refs.send_sem)]
        if (target is None or None in keys or None in (refs.sem_box, refs.send_sem_box)
                or not isinstance(refs.send_sem, _Ref)):
            self.run.give_up()
            return target
        if self._outside(refs, eqn) or not self.followed:
            return target
        self.problems += self._mismatched(refs, eqn)
        if target != self.device:
            self._check_target(target, keys[1], keys[0], refs, eqn)
        lands = self.run.ref_at(target, keys[0])
        self.in_flight.append(_Copy((refs.send_sem, refs.send_sem_box), _window(refs),
                                    self.run.space(refs.src), refs.nbytes, eqn, send=True,
                                    lands=lands))
        there = self.run.ledgers[target]
        landing = _Copy((self.run.ref_at(target, keys[1]), refs.sem_box),
                        (refs.src, refs.src_box, lands, refs.dst_box),
                        into, refs.nbytes, eqn, sender=self.device, lands=lands)
        for copy in there.in_flight:
            if not copy.send and copy.dst is landing.dst and _overlap(copy.dst_box,
                                                                      landing.dst_box):
                self.run.problem(DmaProblem("dma_overwrite", eqn, copy.eqn))
                break
        there.in_flight.append(landing)
        there.most = max(there.most, len(there.in_flight))
        self.most = max(self.most, len(self.in_flight))
        return target

    def landing(self, target, refs):
        key = self.run.key(self.device, refs.dst)
        if target is None or key is None or not 0 <= target < self.run.count:
            return None
        return self.run.ref_at(target, key)

    def until_landed(self, refs, eqn):
        if not self._follows(refs) or refs.outside or self._owed(refs) >= refs.nbytes:
            return
        yield Wait(lambda: not self.followed or self._owed(refs) >= refs.nbytes,
                   lambda: self._unmatched(refs, eqn))

    def signal(self, refs, eqn) -> None:
        target = self.device if refs.device_id is None else self.run.target(self.device, refs)
        key = self.run.key(self.device, refs.sem)
        if target is None or key is None or refs.sem_box is None or refs.amount is UNKNOWN:
            self.run.give_up()
            return
        if not self.followed:
            return
        if target != self.device and key != "barrier" and not self.heard[target]:
            self.run.problem(DmaProblem("remote_before_barrier", eqn,
                                        detail=f"{self.device} → {target}"))
        there = self.run.ledgers[target]
        there.counts.setdefault((key, refs.sem_box), []).append(
            [self.device, int(np.asarray(refs.amount)), eqn])

    def until_signalled(self, refs, eqn):
        queue = self._signals(refs)
        if queue is None:
            return
        wanted = int(np.asarray(refs.amount))
        if sum(amount for _, amount, _ in queue) < wanted:
            yield Wait(lambda: not self.followed or
                       sum(amount for _, amount, _ in queue) >= wanted,
                       lambda: DmaProblem("semaphore_never_signalled", eqn))

    def sem_wait(self, refs, eqn) -> None:
        queue = self._signals(refs)
        if queue is None or not self.followed:
            return
        wanted = int(np.asarray(refs.amount))
        while wanted:
            entry = queue[0]
            taken = min(wanted, entry[1])
            entry[1] -= taken
            wanted -= taken
            if not entry[1]:
                queue.pop(0)
                self.heard[entry[0]] += 1

    # -- bookkeeping
    def _signals(self, refs) -> list | None:
        """The signals a semaphore_wait's semaphore got ([device, amount, signal] each),
        or None where the ledger cannot follow it."""
        key = self.run.key(self.device, refs.sem)
        if key is None or refs.sem_box is None or refs.amount is UNKNOWN:
            self.run.give_up()
            return None
        return self.counts.setdefault((key, refs.sem_box), [])

    def _check_target(self, target, sem_key, dst_key, refs, eqn) -> None:
        """A copy into another device: that device must have said it is in the kernel
        (the barrier), and must have said something since this device's last copy into
        the same window or onto the same receive semaphore (that it has read it)."""
        path = f"{self.device} → {target}"
        heard = [d for d, words in enumerate(self.heard) if words]
        if not self.heard[target] and heard:   # a barrier, with other devices than this
            side = self.run.side
            self.run.problem(DmaProblem("remote_unheard", eqn, detail=(
                f"{path}{side(self.device, target)}; heard from "
                + ", ".join(f"{d}{side(self.device, d)}" for d in heard))))
        elif not self.heard[target]:
            self.run.problem(DmaProblem("remote_before_barrier", eqn, detail=path))
        send = (self.run.key(self.device, refs.send_sem), refs.send_sem_box)
        for was_target, was_sem, was_dst, was_box, heard, earlier, was_send in reversed(
                self.sent):
            if was_target != target or heard != self.heard[target]:
                continue
            if was_dst == dst_key and _overlap(was_box, refs.dst_box):
                self.run.problem(DmaProblem("remote_overwrite", eqn, earlier, path))
                break
            if was_sem == (sem_key, refs.sem_box):
                # one receive semaphore, and send semaphores that change from copy to
                # copy (slots of one array): the two are in each other's place
                swapped = was_send[0] == send[0] and was_send[1] != send[1]
                self.run.problem(DmaProblem(
                    "remote_semaphores_swapped" if swapped else "remote_shared_semaphore",
                    eqn, earlier, path))
                break
        self.sent.append((target, (sem_key, refs.sem_box), dst_key, refs.dst_box,
                          self.heard[target], eqn, send))

    def _follows(self, refs) -> bool:
        if self.followed and (refs.sem_box is None or not isinstance(refs.sem, _Ref)):
            self.run.give_up()
        return self.followed

    def _owed(self, refs) -> int:
        return sum(c.owed for c in self.in_flight
                   if c.sem[0] is refs.sem and c.sem[1] == refs.sem_box)

    def _landed(self, copy) -> None:
        if copy.sender is not None:
            self.heard[copy.sender] += 1

    def leftovers(self) -> list:
        """What is still owed when every device has finished: copies never waited (on
        the sending side, or where they landed) and signals never waited for."""
        found = []
        for copy in self.in_flight:
            if copy.send:   # waited where it landed (wait_recv), never where it left
                found.append(DmaProblem("remote_send_not_waited", copy.eqn))
                continue
            kind = "dma_not_received" if copy.sender is not None else "dma_not_waited"
            found.append(self._misnamed(copy) or DmaProblem(kind, copy.eqn))
        for (key, _), queue in self.counts.items():
            left = [entry for entry in queue if entry[1]]
            if left:
                found.append(DmaProblem("semaphore_left", left[-1][2],
                                        detail=str(sum(e[1] for e in left))))
        return found


class MeshWalk:
    """Every device of one kernel's mesh, walked together, taking turns (``turns``): a
    device runs until it waits for something no device has sent yet, then the next one
    runs (in device order). The order cannot change a verdict: a device's semaphores are
    waited on by that device only, so what each wait eventually receives does not
    depend on who ran first."""

    def __init__(self, axes: tuple, refs: list):
        self.names = tuple(name for name, _ in axes)
        self.sizes = tuple(size for _, size in axes)
        self.count = int(np.prod(self.sizes, dtype=np.int64)) if axes else 1
        self.refs = refs                     # per device: the kernel's refs, in order
        self.index = [{id(r): n for n, r in enumerate(mine)} for mine in refs]
        self.problems: list[DmaProblem] = []
        self.ledgers = [MeshLedger(self, d) for d in range(self.count)]

    @property
    def followed(self) -> bool:
        return self.ledgers[0].followed

    def place(self, device: int) -> dict:
        coords = np.unravel_index(device, self.sizes) if self.sizes else ()
        return {n: (int(c), s) for n, c, s in zip(self.names, coords, self.sizes)}

    def key(self, device: int, ref):
        """Which of the kernel's refs ``ref`` is (the same on every device), or None."""
        if not isinstance(ref, _Ref):
            return None
        if ref.operand == "barrier":
            return "barrier"
        return self.index[device].get(id(ref))

    def ref_at(self, device: int, key):
        return self.ledgers[device].own_barrier if key == "barrier" else self.refs[device][key]

    def space(self, ref) -> str:
        return jaxcompat.memory_space(getattr(ref, "aval", None))

    def side(self, device: int, other: int) -> str:
        """" (left)", " (right)" or " (itself)": where ``other`` lies from ``device`` on a
        ring (a 1-D mesh of more than two devices; "" elsewhere)."""
        if len(self.sizes) != 1 or self.count < 3:
            return " (itself)" if other == device else ""
        step = (other - device) % self.count
        return {0: " (itself)", 1: " (right)", self.count - 1: " (left)"}.get(step, "")

    def target(self, device: int, refs):
        """The device a remote copy or signal goes to, or None where unknown."""
        ids = refs.device_id
        here = np.unravel_index(device, self.sizes) if self.sizes else ()
        try:
            if isinstance(ids, dict):
                coords = [ids.get(n, ids.get((n,), here[k])) for k, n in enumerate(self.names)]
            elif isinstance(ids, (tuple, list)):
                coords = list(ids)
            elif refs.logical or len(self.sizes) != 1:
                value = int(np.asarray(ids))
                return value if 0 <= value < self.count else None
            else:
                coords = [ids]
            if any(c is UNKNOWN for c in coords) or len(coords) != len(self.sizes):
                return None
            coords = [int(np.asarray(c)) for c in coords]
            if any(not 0 <= c < s for c, s in zip(coords, self.sizes)):
                return None
            return int(np.ravel_multi_index(coords, self.sizes))
        except (TypeError, ValueError):
            return None

    def problem(self, found: DmaProblem) -> None:
        self.problems.append(found)

    def give_up(self) -> None:
        """A copy or signal the ledger cannot follow: no device is judged any more, and
        no wait holds a device back."""
        for ledger in self.ledgers:
            ledger.followed = False
            ledger.in_flight = []

    def walk(self, call, jaxpr, per_device: list) -> None:
        """Walks ``jaxpr`` over the grid on every device (``per_device``: its Counts)."""
        def device_walk(device):
            counts = per_device[device]
            outputs = [self.refs[device][n] for n in call.output_refs
                       if n < len(self.refs[device])]
            for point in grid_steps(call.grid):
                before = counts.flops
                yield from Walk(call.grid, tuple(int(p) for p in point), counts,
                                self.ledgers[device], self.place(device)).taking_turns(
                    jaxpr, [], self.refs[device])
                counts.step_flops.append(counts.flops - before)
                counts.uses.reach(outputs)

        stuck = take_turns([device_walk(d) for d in range(self.count)])
        if stuck:   # every device left waits: a TPU would hang, the first wait is named
            self.problems.append(stuck[0][1].what())
        elif self.followed:
            for ledger in self.ledgers:
                self.problems += ledger.leftovers()


def mesh_counts(call, axes: tuple) -> list[Counts]:
    """What ``call``'s kernel does on every device of its mesh (``axes``: ((name,
    size), ...) of the shard_map it runs in), one Counts per device in mesh order; the
    problems of the mesh's DMA ledger (remote copies and semaphores included) are in
    every device's ``dma_problems``, in the order they happened."""
    jaxpr = call.kernel
    count = int(np.prod([size for _, size in axes], dtype=np.int64)) if axes else 1
    refs = [[_fresh(var, n if n < len(call.blocks) else None)
             for n, var in enumerate(jaxpr.invars)] for _ in range(count)]
    run = MeshWalk(axes, refs)
    uses = Uses()   # one for the mesh: a remote copy carries marks to another device
    per_device = [Counts(uses=uses, device=d) for d in range(count)]
    run.walk(call, jaxpr, per_device)
    for counts, ledger in zip(per_device, run.ledgers):
        counts.most_in_flight = ledger.most
        counts.dma_problems = run.problems
        counts.dmas_followed = run.followed
    return per_device


def prefetch_before_run(closed, flat_args: list) -> dict[int, list] | None:
    """The scalar-prefetch operands each pallas_call equation of a program will get,
    where they follow from its integer inputs alone (id of the equation -> values):
    what the DMA ledger needs to judge a kernel before it runs. None when the program
    around the kernels cannot be followed."""

    found: dict[int, list] = {}

    class Around(Walk):
        def equation(self, eqn, values):
            if jaxcompat.is_kernel(eqn):
                count = jaxcompat.kernel_call(eqn).num_prefetch
                prefetch = values[:count]
                if all(v is not UNKNOWN and not isinstance(v, _Ref) for v in prefetch):
                    found.setdefault(id(eqn), [np.asarray(v) for v in prefetch])
                return [UNKNOWN] * len(eqn.outvars)
            outs = super().equation(eqn, values)
            if isinstance(outs, types.GeneratorType):   # around the kernels nothing waits
                outs = finished(outs)
            if any(o is UNKNOWN for o in outs) and _integer_op(eqn, values):
                outs = _bound(eqn, values, outs)
            return outs

    def known(x):
        x = np.asarray(x)
        return x if np.issubdtype(x.dtype, np.integer) else UNKNOWN

    jaxpr, consts = jaxcompat.open_jaxpr(closed)
    try:
        Around().run(jaxpr, [known(c) for c in consts], [known(a) for a in flat_args])
    except (Uncountable, TypeError, ValueError, IndexError):
        return None
    return found


_BOUND_MOST = 1 << 16   # elements: integer work around the kernels small enough to run here


def _integer_op(eqn, values) -> bool:
    """Whether ``eqn`` is integer work on known values that JAX itself may run here: the
    metadata a program computes for its kernels (a cumsum, a gather, a jnp.repeat) with
    primitives the walk does not model. No kernel inside, no float, nothing large."""
    if not eqn.outvars or any(v is UNKNOWN or isinstance(v, _Ref) for v in values):
        return False
    for var in eqn.outvars:
        aval = getattr(var, "aval", None)
        dtype = getattr(aval, "dtype", None)
        if dtype is None or not (np.issubdtype(dtype, np.integer) or dtype == np.bool_) \
                or int(np.prod(aval.shape)) > _BOUND_MOST:
            return False
    return not any(jaxcompat.is_kernel(inner) for jaxpr, _ in jaxcompat.parts(eqn)
                   for inner in jaxpr.eqns)


def _bound(eqn, values, unknown: list) -> list:
    """``eqn`` applied to its known values by JAX (eagerly, on the host's device), or
    ``unknown`` where that fails."""
    try:
        return [np.asarray(out) for out in jaxcompat.bind(eqn, [np.asarray(v) for v in values])]
    except Exception:
        return unknown
