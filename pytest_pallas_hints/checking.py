"""What test files call: ``run`` or ``measure`` a learner function, ``check`` its
output, ``check_work`` and ``check_traffic`` what its kernels did, check that it
``lowers_for_tpu``, ``fail`` with a finding of a test's own, and draw inputs
from ``Rng``.

Every verdict on a learner function comes from one trace and one run of it
(``program.py``): the structure its lesson requires (``structure.Structure``),
the value, the flops of the dots its kernels executed and the bytes they
moved. Nothing is run a second time, in another mode the code could notice.

``check`` does not print; it raises ``Mismatch``, an ``AssertionError`` that
carries both arrays, so the plugin can say *how* they differ (shape, NaN,
which blocks, a constant factor, a known wrong answer) instead of dumping
numbers. A failure of the kit's own machinery raises ``KitError``, which the
plugin reports as a kit problem, never as the learner's mistake.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import zlib
from typing import Callable, Mapping, NoReturn

from .frozen import np

from . import diagnose, jaxcompat, program, walk
from .chapters import ChapterImportError
from .structure import (WORDS, Structure, blocks_of, carried_state, state_sources,
                        check as structure_findings)

# (rtol, atol relative to the largest |expected|) per dtype of the expected output.
TOLERANCE = {"float64": 1e-9, "float32": 2e-5, "float16": 2e-3, "bfloat16": 2e-2}


class Mismatch(AssertionError):
    """An output that differs from the expected one; ``findings()`` says how."""

    def __init__(self, yours, expected, *, name: str, blocks, axes, likely, tolerance: float,
                 carries: bool | None = None, narrow: bool | None = None,
                 stored: bool | None = None, gridless: bool | None = None):
        self.yours, self.expected = yours, expected
        self.name, self.blocks, self.axes, self.tolerance = name, blocks, axes, tolerance
        self._likely, self.carries, self.narrow, self.stored = likely, carries, narrow, stored
        self.gridless = gridless
        super().__init__(f"{name} differs from the expected value")

    def findings(self) -> list[diagnose.Finding]:
        likely = {k: np.asarray(v() if callable(v) else v) for k, v in (self._likely or {}).items()}
        with np.errstate(all="ignore"):   # inf and NaN in yours are findings, not warnings
            return diagnose.compare(self.yours, self.expected, name=self.name, blocks=self.blocks,
                                    axes=self.axes, likely=likely,
                                    tolerance=self.tolerance, carries=self.carries,
                                    narrow=self.narrow, stored=self.stored,
                                    gridless=self.gridless)

    def __str__(self) -> str:
        return "\n".join(diagnose.render(self.findings()))


class Diagnosed(AssertionError):
    """A failure a test (or a kit check) explains itself: findings, most specific first."""

    def __init__(self, kind: str, says: str = "", facts=(), findings=None):
        self._findings = findings or [diagnose.Finding(kind, says, facts=list(facts))]
        first = self._findings[0]
        super().__init__(first.says)
        self.kind, self.says, self.facts = first.kind, first.says, first.facts

    def findings(self) -> list[diagnose.Finding]:
        return self._findings


def fail(kind: str, says: str, facts=(), *, name: str = "output") -> NoReturn:
    """Fails the test with a finding of its own, e.g. a rule a learner's choice broke:
    ``fail("vmem_budget", "your blocks do not fit", [("vmem", "18 MiB > 16 MiB")])``.
    ``name``: the output (or kernel) it is about, as in ``check``: the failure's header
    names it, and the puzzle's words for ``kind:name`` come first."""
    failure = Diagnosed(kind, says, facts)
    failure.name = name
    raise failure


def raised(error: BaseException, *, kind: bool = True) -> str:
    """An error as a fact row shows it: its type (``kind``) and the first line of its
    message, at most 200 characters; a bare ``assert`` or an empty ``ValueError()`` has
    its type alone."""
    lines = str(error).strip().splitlines()
    first = lines[0][:200] if lines else ""
    if not kind:
        return first or type(error).__name__
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


class KitError(Exception):
    """The kit's own machinery failed: a problem to report, not the learner's mistake."""

    def __init__(self, step: str, error: BaseException):
        self.step, self.error = step, error
        super().__init__(f"{step}: {type(error).__name__}: {error}")


_VERDICTS = (Mismatch, Diagnosed, KitError, jaxcompat.CannotVerify)


@contextlib.contextmanager
def kit_step(step: str):
    """Inside: an exception that is not a verdict is the kit's fault (``KitError``)."""
    try:
        yield
    except _VERDICTS:
        raise
    except Exception as error:
        raise KitError(step, error) from error


# ------------------------------------------------------------------- running ---

@dataclasses.dataclass
class Measured:
    """One run of a learner function: its output, and what its kernels did."""
    output: object
    program: program.Program
    executed: list
    args: tuple
    walked: list = dataclasses.field(default_factory=list)   # (call, prefetch, Counts)
    #                                 kernels already walked before the run
    perturbed: Callable | None = None   # dot ids -> the output with their results
    #                                 perturbed (program.execute_perturbable)
    dot_lesson: bool = False          # the puzzle requires a dot in a kernel

    @functools.cached_property
    def counts(self) -> list[walk.Counts]:
        """Per kernel run, what its kernel executed over the grid (flops, DMAs)."""
        jaxcompat.require("work accounting")
        with kit_step("work accounting"):
            try:
                return [self._on_mesh(run) if run.device is not None else
                        self._walked(run.site.call, run.prefetch) or
                        walk.kernel_counts(run.site.call, run.prefetch) for run in self.executed]
            except walk.Uncountable as why:
                fail("uncountable", (
                    f"the kit counts what a kernel does from its grid indices and prefetched "
                    f"scalars, and cannot count yours: {why}. Write conditions and loop "
                    "bounds in terms of pl.program_id and scalar-prefetch values."))

    @functools.cached_property
    def work(self) -> int:
        """Flops of the dots the kernels executed (a skipped block counts zero)."""
        self._countable()
        return sum(counts.flops for counts in self.counts)

    @functools.cached_property
    def outer_products(self) -> int:
        """Elements of the float multiplies the kernels executed that are outer products
        (``products``): a matmul written elementwise, one multiply per term."""
        self._countable()
        return sum(counts.outer for counts in self.counts)

    @functools.cached_property
    def reaching_work(self) -> int:
        """Flops of the executed dots whose results reach an output (``walk.Uses``): not
        multiplied by a known zero, dropped by a select, overwritten or never stored."""
        self._countable()
        return sum(counts.used_flops for counts in self.counts)

    @functools.cached_property
    def used_work(self) -> int:
        """Of ``reaching_work``, the flops of the dots that multiply data (no operand
        built in the kernel from nothing: ``walk.Uses.constant``) and whose result moves
        an output (``idle_dots``)."""
        idle = self.idle_dots
        return sum(counts.uses.used_flops(counts.device, idle) for counts in self.counts)

    @functools.cached_property
    def constant_work(self) -> int:
        self._countable()
        return sum(counts.uses.constant_flops(counts.device) for counts in self.counts)

    @functools.cached_property
    def idle_dots(self) -> frozenset:
        """ids of the dots that the walk saw reach an output but whose result moves no
        output: run again with one dot's result perturbed (``jaxcompat.perturbing``:
        doubled in half its elements), every output is as it was (``_moved``). A result
        scaled until it rounds away, or dropped by a select or a maximum that never
        picks it, is computed and wasted."""
        return frozenset(dot for dot in self._dots if self._moves(dot) is False)

    def any_dot_moves(self) -> bool | None:
        """Whether some dot whose result reaches an output moves it (``_moves``), tried
        one at a time, heaviest first, until one does; None where no run could tell."""
        found = []
        for dot in self._dots:
            found.append(self._moves(dot))
            if found[-1]:
                return True
        return False if found and None not in found else None

    @functools.cached_property
    def _dots(self) -> list:
        """ids of the dots whose results the walk saw reach an output, heaviest first."""
        if any(site.call.backend != "mosaic_tpu" for site in self.program.sites):
            # Mosaic GPU: no walk follows values there; every read of an accumulator
            return list(getattr(self.perturbed, "dots", ()))
        self._countable()
        flops = {}
        for counts in self.counts:
            for eqn, amount in counts.uses.reaching_eqns(counts.device).items():
                flops[eqn] = flops.get(eqn, 0) + amount
        return sorted(flops, key=lambda eqn: -flops[eqn])

    def _moves(self, dot: int) -> bool | None:
        """Whether perturbing the result of ``dot`` moves an output at all (``_moved``); None
        where the perturbed run failed, which tells nothing. A dot is perturbed together
        with the others that the same call in the learner's code made (a loop over taps
        or heads traces one call many times: one run, not one per iteration), so what
        is judged is each dot the learner wrote."""
        if self.perturbed is None:
            return None
        group = getattr(self.perturbed, "together", {}).get(dot, frozenset({dot}))
        cache = self.__dict__.setdefault("_moved_by", {})
        if group not in cache:
            with kit_step("perturbing the dots"):
                try:
                    cache[group] = _moved(self.output, self.perturbed(group))
                except Exception:
                    cache[group] = None
        return cache[group]

    def moves_when_perturbed(self, eqns) -> bool | None:
        """Whether the output moves when the results of these kernel equations (ids) are
        perturbed (``program.run_perturbed``, then ``_moved``); None where that run
        failed, which tells nothing."""
        with kit_step("perturbing values"):
            try:
                return _moved(self.output, program.run_perturbed(self.program, self.args,
                                                                 frozenset(eqns)))
            except Exception:
                return None

    @functools.cached_property
    def traffic(self):
        """Bytes moved between HBM and VMEM (``traffic.Traffic``)."""
        from . import traffic

        jaxcompat.require("byte accounting")
        self._countable()
        counts = self.counts
        with kit_step("byte accounting"):
            try:
                return traffic.count(self.program, self.executed, counts, self.output)
            except walk.Uncountable as why:
                fail("uncountable", f"the kit cannot count the bytes your kernels move: {why}.")

    @functools.cached_property
    def vmem(self) -> list:
        """The VMEM each kernel of the program allocates (``footprint.Footprint``)."""
        from . import footprint

        with kit_step("VMEM accounting"):
            return [footprint.vmem(site.call) for site in self.program.sites]

    def blocks_from(self, array) -> list:
        """The BlockSpec'd operands (``jaxcompat.Block``) of every kernel whose value
        comes from ``array``, one of the arguments ``fn`` was measured with (found by
        identity, whatever its position); ``None``: those that come from no argument
        (tables and constants the function built)."""
        return [site.call.blocks[n - site.call.num_prefetch]
                for site, n in self._operands_from(array)
                if n >= site.call.num_prefetch]

    def bytes_from(self, array, direction: str = "read") -> int:
        """The bytes the kernels moved between HBM and VMEM for the operands whose value
        comes from ``array``: BlockSpec copies and the kernels' own DMAs ("read": into
        VMEM; "written": out of it)."""
        mine = {(site.index, n) for site, n in self._operands_from(array)}
        moved = sum(op.bytes for op in self.traffic.operands
                    if (op.site, op.operand) in mine and op.direction == direction)
        for run, counts in zip(self.executed, self.counts):
            for source, target, nbytes in counts.dma_operands:
                end = source if direction == "read" else target
                if (run.site.index, end) in mine:
                    moved += nbytes
        return moved

    def state_fed_by(self, array) -> list[tuple[str, object]]:
        """The states the kernels carry from step to step (what, its dtype) whose update
        reads a value that comes from ``array``, one of the arguments ``fn`` was measured
        with (a scale multiplied into a running sum at every step, say)."""
        mine = {(site.index, n) for site, n in self._operands_from(array)}
        return [(what, dtype) for site in self.program.sites
                for what, dtype, fed in state_sources(site.call)
                if any((site.index, n) in mine for n in fed)]

    def copies_of(self, array) -> "np.ndarray":
        """How many times the kernels' own DMAs copied each element of ``array`` (an
        argument left in HBM): 0 where nothing read it, 2 where two copies did."""
        mine = {(site.index, n) for site, n in self._operands_from(array)}
        copied = np.zeros(np.shape(array), np.int64)
        for run, counts in zip(self.executed, self.counts):
            for source, box, _, _ in counts.dma_windows:
                if (run.site.index, source) in mine:
                    if box is None or len(box) != copied.ndim:
                        fail("uncountable", "the kit cannot tell which part of the array a "
                                            "copy of yours reads (an index it cannot know).")
                    copied[tuple(slice(lo, hi) for lo, hi in box)] += 1
        return copied

    @functools.cached_property
    def remote_bytes(self) -> int:
        """The bytes the kernels' remote DMAs moved from chip to chip, all devices
        together (each copy counted once, by the device that started it)."""
        return sum(nbytes for counts in self.counts for _, nbytes, _, _ in counts.remote)

    def _on_mesh(self, run) -> walk.Counts:
        """What a kernel inside a shard_map did on device ``run.device`` (every device of
        its mesh walked together, once)."""
        for done, values, counts in self.walked:
            if done is run.site.call and values is None:
                return counts[run.device]
        per_device = walk.mesh_counts(run.site.call, run.site.mesh)
        self.walked.append((run.site.call, None, per_device))
        return per_device[run.device]

    def _walked(self, call, prefetch):
        """The walk made before the run of this kernel, on the same prefetch values."""
        for done, values, counts in self.walked:
            if values is None:
                continue
            if done is call and len(values) == len(prefetch) and all(
                    np.array_equal(np.asarray(a), np.asarray(b))
                    for a, b in zip(values, prefetch)):
                return counts
        return None

    def _countable(self):
        repeated = [s for s in self.program.sites if s.repeated]
        if repeated:
            fail("uncountable", (
                f"{repeated[0].call.name}() is called inside a lax loop or branch around "
                "the kernel: call pl.pallas_call directly, so that its work can be counted."))
        prefetched = [s for s in self.program.sites if s.mesh and s.call.num_prefetch]
        if prefetched:
            fail("uncountable", (
                f"{prefetched[0].call.name}() takes scalar prefetch inside a shard_map: its "
                "values differ from device to device, and the kit cannot count its work."))

    # -- what the walk says about the operands' blocks: which each step visits, which a
    #    store reached
    def block_indices(self, block) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Per run of the kernel ``block`` belongs to (one of ``blocks_from``'s, or one of
        ``site.call.blocks``), its grid steps [steps, grid rank] in the order the grid
        runs them and the block indices [steps, dims] its index map names at each, with
        the scalar-prefetch values of that run. None when the index map cannot be
        followed."""
        try:
            found = []
            for run in self.executed:
                if any(b is block for b in run.site.call.blocks):
                    steps = walk.grid_steps(run.site.call.grid)
                    found.append((steps, walk.index_maps(block, steps, run.prefetch)))
            return found
        except Exception:   # an index map the walk cannot evaluate: not known
            return None

    def stored_blocks(self, block) -> set[tuple] | None:
        """The block indices of ``block`` (a kernel's output operand, one of
        ``site.call.blocks``) that some grid step stored into, by a store or a DMA, from
        the walk of its kernel; a store under a condition the walk cannot decide counts
        as made. None when the walk or the index map cannot be followed."""
        try:
            runs = [(run, counts) for run, counts in zip(self.executed, self.counts)
                    if any(b is block for b in run.site.call.blocks)]
            stored = set()
            for run, counts in runs:
                call = run.site.call
                operand = call.num_prefetch + next(k for k, b in enumerate(call.blocks)
                                                   if b is block)
                points = [point for point, op in counts.stores if op == operand]
                if points:
                    steps = np.array(points, np.int64).reshape(len(points), -1)
                    stored |= {tuple(int(i) for i in row)
                               for row in walk.index_maps(block, steps, run.prefetch)}
            return stored
        except Exception:   # uncountable, or work accounting missing: not known
            return None

    def stores_an_output(self) -> bool | None:
        """Whether any grid step of any kernel stored into an output (a store or a DMA,
        from the walk; one under a condition the walk cannot decide counts); None when
        not known."""
        try:
            for run, counts in zip(self.executed, self.counts):
                call = run.site.call
                outputs = {call.num_prefetch + k for k, b in enumerate(call.blocks)
                           if not b.is_input}
                if any(op in outputs for _, op in counts.stores):
                    return True
            # The walk does not follow a Mosaic GPU kernel's TMA copies out of SMEM
            # (copy_smem_to_gmem): there, no store seen is no proof that none ran.
            if any(getattr(run.site.call, "backend", "") == "mosaic_gpu"
                   for run in self.executed):
                return None
            return False
        except Exception:   # uncountable, or work accounting missing: not known
            return None

    def _operands_from(self, array) -> list:
        import jax

        leaves = jax.tree_util.tree_leaves(self.args)
        positions = {n for n, leaf in enumerate(leaves) if leaf is array}
        if array is not None and not positions:
            raise KitError("finding an operand", ValueError(
                "the array is not one of the arguments the function was measured with"))
        return [(site, n) for site in self.program.sites for n, inputs in enumerate(site.inputs)
                if (inputs & positions if array is not None else not inputs)]


_MEASURED: list = []   # the runs measured in the current test (for the cost model)
_TRACED: list = []     # (program, args) of the last measure of the test, run or not


_TPU_SIZED: list[bool] = [False]   # the running test is a tpu-marked configuration


def measured_in_test(forget: bool = False, tpu: bool = False) -> list:
    """The programs ``measure`` ran in this test so far; ``forget`` starts a new test
    (``tpu``: one marked tpu, see ``tpu_sized``)."""
    if forget:
        _MEASURED.clear()
        _TRACED.clear()
        _TPU_SIZED[0] = tpu
    return list(_MEASURED)


def traced_in_test() -> list:
    """(program, args) of the last program ``measure`` traced in this test, whether or
    not it ran (a failing run's walk is drawn from it)."""
    return list(_TRACED)


def tpu_sized() -> bool:
    """Whether the running test is a ``tpu``-marked configuration: sizes a real TPU runs,
    where the kit's counts of work and bytes (a walk of every grid step on the host)
    would take longer than the kernel. Tests return before those checks there."""
    return _TPU_SIZED[0]


def _moved(before, after) -> bool:
    """Whether any element of any leaf of ``after`` differs from ``before``'s, however
    little (NaN where NaN was is no change). The same compiled program runs both, so a
    difference is the perturbation's: a result that reaches the output only through a
    steep decay still moves some bit of it, where one scaled until it rounds away, or
    never picked, moves none."""
    import jax

    for a, b in zip(jax.tree_util.tree_leaves(before), jax.tree_util.tree_leaves(after)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return True
        differ = a != b
        if np.issubdtype(a.dtype, np.inexact) or a.dtype.kind == "V" or differ.dtype != bool:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            differ = (a64 != b64) & ~(np.isnan(a64) & np.isnan(b64))
        if differ.any():
            return True
    return False


def measure(fn: Callable, *args, structure: Structure | None, **static) -> Measured:
    """Runs ``fn(*args, **static)`` once (traced once, compiled as one program) and keeps
    what the kit measures of it. ``structure`` is what the puzzle's lesson requires
    (None: nothing, for the kit's own tests)."""
    from . import projection

    if projection.active():   # --cost at a tpu configuration's size: trace, count, stop
        projection.intercept(fn, args, static)
    traced = _trace(fn, args, static)  # the learner's Python runs here, once
    _TRACED[:] = [(traced, args)]      # for --show, should the run fail
    if structure is not None:
        _check_structure(traced, structure)
    _check_collective_id(traced)
    _check_hbm_access(traced)
    unchecked, walked = _check_before_run(traced, args)
    try:
        output, executed, perturbed = program.execute_perturbable(traced, args)
    except Exception as error:
        _blame(error, "running kernels")
        _locate(error, traced)
        raise program.learners(error)
    if unchecked:
        walked += _check_walks([(run.site.call, run.prefetch) for run in executed
                                if run.site.index in unchecked])
    measured = Measured(output, traced, executed, args, walked, perturbed)
    _MEASURED.append(measured)
    measured.dot_lesson = structure is not None and bool(
        {"dot_general", "wgmma_ref"} & structure.inside)
    return measured


def check_after_test() -> None:
    """What is checked once a puzzle's test has passed all its own checks: the runs it
    measured whose lesson is a dot have one that moves the output (``_check_dots_move``;
    it takes another run of the program, so it waits for the values to be right)."""
    for measured in list(_MEASURED):
        if measured.dot_lesson:
            _check_dots_move(measured)


def _check_dots_move(measured: Measured) -> None:
    """Where the lesson's work is a dot, the dots move the output: run again with a dot's
    result doubled in half its elements, the output changes. On a TPU some dot whose
    result the walk saw reach an output must (``check_work`` asks it of each, where a
    puzzle counts the work); on a GPU every read of a wgmma accumulator must. Told where
    the output is finite (NaN or inf: the values' own diagnosis says more)."""
    import jax

    leaves = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(measured.output)]
    if not all(np.isfinite(leaf.astype(np.float64)).all() for leaf in leaves):
        return
    try:
        dots = measured._dots
    except (Diagnosed, KitError, walk.Uncountable, jaxcompat.CannotVerify):
        return
    if not dots:
        return
    how = ("the kit ran them again with each dot's result doubled in half its elements, "
           "and the output came out the same")
    if any(site.call.backend != "mosaic_tpu" for site in measured.program.sites):
        idle = [dot for dot in dots if measured._moves(dot) is False]
        if idle:
            raise Diagnosed("work_unused", (
                f"{len(idle)} of the {len(dots)} reads of a wgmma accumulator in your "
                f"kernels (acc[...]) move no output: {how} with the value read doubled in "
                "half its elements. A result scaled until it rounds away (or zero), or one "
                "that a select or a maximum never picks, computes nothing the result needs: the "
                "products are computed somewhere else. Let plgpu.wgmma compute them, and "
                "use its accumulator."),
                [("work", f"accumulator reads moving the output when perturbed: "
                          f"{len(dots) - len(idle)} of {len(dots)}")])
    elif measured.any_dot_moves() is False:
        raise Diagnosed("work_unused", (
            f"your kernels run the matmul (jnp.dot), but its result moves no output: {how} "
            "each time. A result scaled until it rounds away (or zero), or one that a select "
            "or a maximum never picks, computes nothing the result needs: the products are "
            "computed somewhere else. Let the dot compute them, and use it."),
            [("work", f"dot flops executed: {measured.work:,} · none of them moves the "
                      "output when perturbed")])


def _check_collective_id(traced) -> None:
    """A TPU kernel that takes the barrier semaphore (pltpu.get_barrier_semaphore) must
    say which collective it belongs to (pltpu.CompilerParams(collective_id=...)):
    without, the interpreter fails deep inside itself. Named with the learner's lines
    before anything runs."""
    from . import chapters

    with kit_step("checks before the run"):
        calls = {index: eqn for eqn, index in _eqns_of(traced)}
        for site in traced.sites:
            call = site.call
            if call.backend != "mosaic_tpu" or call.collective_id is not None:
                continue
            barrier = _first_eqn(call.kernel, "get_barrier_semaphore")
            if barrier is None:
                continue
            facts = [("barrier", _line_of(barrier, chapters.sources()))]
            if site.index in calls:
                facts.append(("call", _line_of(calls[site.index], chapters.sources())))
            raise Diagnosed("no_collective_id", (
                f"your kernel takes the barrier semaphore, but its {call.api} gives no "
                "collective id: pltpu.get_barrier_semaphore() returns the barrier "
                "semaphore of the collective that the id names (the same one in this "
                "kernel on every device), so without an id there is none to return. Give "
                "the call compiler_params=pltpu.CompilerParams(collective_id=0)."), facts)


def _check_hbm_access(traced) -> None:
    """A TPU kernel reads or stores a ref that stays in HBM (memory_space=pl.ANY, or an
    operand of a pl.kernel) as if it were in VMEM: named with the line of that read or
    store before anything runs (the interpreter's own error has no line)."""
    from . import chapters

    def in_hbm(eqn):
        return eqn.primitive.name in ("get", "swap", "addupdate") and eqn.invars and \
            jaxcompat.memory_space(getattr(eqn.invars[0], "aval", None)) == "any"

    with kit_step("checks before the run"):
        for site in traced.sites:
            if site.call.backend != "mosaic_tpu":
                continue
            eqn = _first_eqn(site.call.kernel, in_hbm)
            if eqn is None:
                continue
            store = eqn.primitive.name != "get"
            raise Diagnosed("hbm_ref_access", (
                f"this line {'stores into' if store else 'reads'} a ref that stays in HBM "
                "(memory_space=pl.ANY, or an operand of a pl.kernel) as if it were in "
                "VMEM: a kernel computes only on VMEM (and SMEM) values, and an HBM ref "
                "can only be copied. Copy it into a VMEM buffer first "
                "(pltpu.sync_copy(hbm_ref, vmem_ref), or an async copy you wait for)"
                + (", compute there, and copy the result back out." if store else
                   ", and read that.")),
                [("stores" if store else "reads", _line_of(eqn, chapters.sources()))])


def _first_eqn(jaxpr, name):
    """The first equation of primitive ``name`` (or for which ``name(eqn)`` holds) in
    ``jaxpr``, depth first, or None."""
    return next((eqn for eqn in jaxcompat.equations(jaxpr)
                 if (name(eqn) if callable(name) else eqn.primitive.name == name)), None)


# ---------------------------------------------------------------- DMA ledger ---

WALK_BEFORE = 4096   # grid steps up to which a kernel is walked before it runs


def _check_before_run(traced, args) -> tuple[set[int], list]:
    """Walks every kernel before the program runs, where its scalar-prefetch values are
    known: a DMA wait that would never return, or a read or write past the ends of a
    ref, is named with its line, instead of a time-out or an error without one. Returns
    the sites with DMAs that could not be judged yet (their prefetch values only exist
    once the program ran), and the walks made."""
    import jax

    def small(call):   # a Mosaic GPU kernel is judged by GPU interpret mode itself
        return call.backend == "mosaic_tpu" and None not in call.grid \
            and int(np.prod(call.grid or (1,))) <= WALK_BEFORE

    sites = [site for site in traced.sites if not site.repeated and small(site.call)]
    if not sites or "work accounting" in jaxcompat.missing():
        return set(), []
    meshed = [site for site in sites if site.mesh]
    sites = [site for site in sites if not site.mesh]
    walked = _check_mesh_walks(meshed)
    with kit_step("checks before the run"):
        known = {}
        if any(site.call.num_prefetch for site in sites):
            known = walk.prefetch_before_run(traced.closed,
                                             jax.tree_util.tree_leaves(args)) or {}
        eqn_of = {index: eqn for eqn, index in _eqns_of(traced)}
        ready, unchecked = [], set()
        for site in sites:
            if not site.call.num_prefetch:
                ready.append((site.call, []))
            elif id(eqn_of.get(site.index)) in known:
                ready.append((site.call, known[id(eqn_of[site.index])]))
            elif walk.has_dmas(site.call):
                unchecked.add(site.index)
    return unchecked, walked + _check_walks(ready)


def _check_mesh_walks(sites) -> list:
    """Walks every kernel that runs inside a shard_map on all the devices of its mesh
    together, and raises the first problem of their DMA ledger (remote copies and
    semaphores included): a wait no device will ever satisfy, a copy into a device that
    has not said it is in the kernel, a copy never waited. Returns the walks,
    (call, None, Counts per device)."""
    from . import chapters

    walked = []
    for site in sites:
        if site.call.num_prefetch:
            continue
        with kit_step("checks before the run"):
            try:
                per_device = walk.mesh_counts(site.call, site.mesh)
            except walk.Uncountable:
                continue
        walked.append((site.call, None, per_device))
        outside = [found for counts in per_device for found in counts.outside]
        if outside:
            raise Diagnosed("", findings=[_outside_finding(*outside[0], chapters.sources())])
        counts = per_device[0]
        if counts.dma_problems:
            raise Diagnosed("", findings=[_dma_finding(counts.dma_problems[0],
                                                       chapters.sources())])
    return walked


def _eqns_of(traced):
    """(equation, site index) for every pallas_call equation of the program."""
    return [(eqn, traced._by_eqn[id(eqn)])
            for eqn in jaxcompat.equations(traced.closed.jaxpr,
                                           into=lambda eqn: not jaxcompat.is_kernel(eqn))
            if id(eqn) in traced._by_eqn]


def _check_walks(runs) -> list:
    """Walks these kernel runs ((call, prefetch values) each) and raises the first read
    or write past the ends of a ref, else the first unmatched DMA start or wait, as a
    finding with the learner's lines. Returns the walks, (call, prefetch, Counts)."""
    from . import chapters

    walked = []
    for call, prefetch in runs:
        with kit_step("checks before the run"):
            try:
                counts = walk.kernel_counts(call, prefetch)
            except walk.Uncountable:
                continue   # judged by the run itself (a race, a time bound)
        walked.append((call, prefetch, counts))
        if counts.outside:
            raise Diagnosed("", findings=[_outside_finding(*counts.outside[0],
                                                           chapters.sources())])
        if counts.dma_problems:
            raise Diagnosed("", findings=[_dma_finding(counts.dma_problems[0],
                                                       chapters.sources())])
    return walked


def _outside_finding(eqn, past: str, sources) -> diagnose.Finding:
    writes = eqn.primitive.name in ("swap", "addupdate")
    return diagnose.Finding("out_of_bounds_ref", (
        f"this {'store' if writes else 'read'} names a part of a ref past its ends "
        f"({past}): on a TPU nothing stops it, and it {'overwrites' if writes else 'reads'} "
        "whatever memory lies there (and negative indices do not wrap around). An index "
        "computed one step too far, a loop bound that runs one step too far, or a table "
        "with fewer entries than the grid reads? A read whose index may be out of range "
        "belongs inside the pl.when that needs it, where the index is "
        "valid."), facts=[("writes" if writes else "reads", _line_of(eqn, sources)),
                             ("index", past)])


def line_of(eqn) -> str:
    """"exercises/x.py:12   code" for an equation of a learner's kernel (a test's facts)."""
    from . import chapters

    return _line_of(eqn, chapters.sources())


def _line_of(eqn, sources) -> str:
    from pathlib import Path

    name = eqn.primitive.name
    if (name.startswith("dma") or name in ("copy_gmem_to_smem", "copy_smem_to_gmem")) \
            and jaxcompat.from_emit_pipeline(eqn):
        return (f"a copy that {'pltpu' if name.startswith('dma') else 'plgpu'}.emit_pipeline "
                "makes for one of its BlockSpecs: check their block shapes and index maps "
                "(block indices, not element offsets)")
    where = program._user_line(eqn, sources) or program._user_line(eqn, None)
    if where is None:
        return "(inside JAX: the line that called it is not known)"
    shown = f"{Path(where[0]).parent.name}/{Path(where[0]).name}:{where[1]}"
    return f"{shown}   {diagnose._source_line(where).strip()}"


_DMA_SAYS = {
    "dma_never_started": (
        "this .wait() waits for a copy that no .start() began on its semaphore: on a TPU "
        "the kernel would wait forever. Start the copy before you wait for it, and wait "
        "on the very semaphore (and slot) that the copy signals."),
    "dma_waited_twice": (
        "this .wait() waits for a copy that an earlier .wait() (the line under "
        "'waited') already took: a wait takes its copy's bytes from the semaphore once, "
        "so a second one has nothing left, and on a TPU the kernel would wait forever. "
        "Wait once for each .start()."),
    "dma_shared_semaphore": (
        "this .wait() is on a semaphore that copies of the other direction signal too "
        "(the line under 'also on it'): a wait returns once enough bytes have landed on "
        "its semaphore, whichever copy brought them, so on a TPU it could return while "
        "its own copy is still landing. Give reads and writes a semaphore each."),
    "dma_not_waited": (
        "a copy started here is still in flight when the kernel ends: nothing waits for "
        "it, so its data may not have landed. Every .start() needs a .wait() on the same "
        "copy before the kernel (or its run_scoped) ends, under the same condition, and "
        "within the loop's bounds: a loop that stops one step early (// where pl.cdiv is "
        "needed) leaves the copies its last step started unwaited."),
    "dma_overwrite": (
        "this copy writes into a buffer that an earlier copy, still in flight (the line "
        "under 'in flight'), is writing too: the two race, and neither result can be "
        "trusted. Either that earlier copy was never waited (every .start() needs its "
        ".wait(), under the same condition, and inside the loop's bounds: a loop that "
        "stops one step early never waits its last copies), or this copy picked the wrong "
        "slot. Wait for a slot's copy (and use its data) before you start the next copy "
        "into it."),
    "dma_wrong_semaphore": (
        "this .wait() describes the copy started at the line under 'started', but names "
        "another semaphore (or slot) than that copy signals: a wait takes its bytes from "
        "the semaphore it names, so it waits for some other copy (or forever), and this "
        "copy is never waited. Wait on the semaphore the copy was started with: build "
        "the wait from the same pltpu.make_async_copy(...) arguments as the start."),
    "dma_dtype": (
        "this copy goes between refs of two dtypes (under 'dtypes'): a DMA moves bytes "
        "and cannot convert, so the destination would hold the source's bits read as "
        "another type. Give the VMEM buffer the dtype of the array it copies (x.dtype), "
        "and cast values in the kernel after the copy has landed."),
    "dma_shape": (
        "this copy goes between windows of two shapes (under 'shapes'): a DMA copies a "
        "window onto a window of the same shape. Is the VMEM buffer shaped like the part "
        "of the array it receives (not transposed, not one row short), and does each "
        ".at[...] name the part you mean?"),
    "dma_not_received": (
        "a copy started here lands on another device, which never waits for it: its "
        "data may not have arrived when that device reads it, and its receive semaphore "
        "still counts the bytes when the kernel ends. The receiving side waits too: "
        ".wait() (or .wait_recv()) on the descriptor, on every device, for every copy "
        "that lands there."),
    "remote_send_not_waited": (
        "the sending side of this remote copy is never waited: a remote copy signals two "
        "semaphores, its send semaphore here once the data has left, and its receive "
        "semaphore on the device it lands on, and each side must be waited before the "
        "kernel ends (a TPU wants every semaphore back at zero, and the source must not "
        "change until the data has left). copy.wait() waits for both sides; after "
        "copy.wait_recv() alone, add copy.wait_send()."),
    "remote_before_barrier": (
        "this copy (or signal) goes into another device (under 'devices': from → to) before that "
        "device has said it is running this kernel. A device writes into another only "
        "after that one has signalled it through the barrier, as JAX's own collective "
        "kernels do (Mosaic's default device barrier also synchronises them on a TPU, "
        "unless CompilerParams(skip_device_barrier=True) turns it off; the explicit "
        "handshake is the lesson, and what a kernel without the default relies on). "
        "Start with a barrier: sem = pltpu.get_barrier_semaphore(); signal the neighbours "
        "that will write into you (pl.semaphore_signal(sem, 1, device_id=...)), and "
        "pl.semaphore_wait(sem, n) for as many signals as you receive, before the first "
        "remote copy (and give the pallas_call pltpu.CompilerParams(collective_id=0))."),
    "remote_unheard": (
        "this copy goes into a device (under 'devices': from → to) that has not said it "
        "is running this kernel, while the barrier did hear from other devices (after "
        "'heard from'): the barrier pairs other devices than the copy. A device may "
        "write only into the devices it has heard from: the device it writes into "
        "signals it (pl.semaphore_signal(sem, 1, device_id=...) names the device that "
        "will write into the signaller), and it waits for that signal. Either the copy "
        "goes to the wrong device (its device_id), or the barrier signals the wrong one."),
    "remote_overwrite": (
        "this copy writes into a buffer of another device (under 'devices': from → to) that your "
        "earlier copy (the line under 'in flight') also filled, and that device has not "
        "told you since that it has read it: nothing stops this copy landing while it "
        "still reads the last one. Let the receiver say when the buffer is free: it "
        "signals a REGULAR semaphore on the sender (pl.semaphore_signal(ready, 1, "
        "device_id=...)) once it has read the data, and the sender waits for that signal "
        "(pl.semaphore_wait(ready, 1)) before it sends into the buffer again."),
    "remote_shared_semaphore": (
        "this copy lands on another device (under 'devices': from → to) on the same receive "
        "semaphore as your earlier copy (the line under 'in flight'), and that device has "
        "said nothing since: both may be in flight at once, and a wait there returns "
        "when either one has landed, so it may read the other's window before its data "
        "is there. Give each copy that may be in flight its own receive semaphore (an "
        "array of them: pltpu.SemaphoreType.DMA((steps,)), and recv_sems.at[step])."),
    "remote_semaphores_swapped": (
        "this copy lands on another device (under 'devices': from → to) on the same "
        "receive semaphore as your earlier copy (the line under 'in flight'), while its "
        "send semaphore changes from copy to copy: the two semaphores look swapped. "
        "make_async_remote_copy(src, dst, send_sem, recv_sem, device_id=...) takes the "
        "send semaphore first and the receive semaphore second; the one that needs a "
        "slot per copy in flight is the receive one."),
    "semaphore_never_signalled": (
        "this pl.semaphore_wait waits for signals that no device sends: this device "
        "waits forever (and every device waiting for it), so a TPU would hang here. Does "
        "the device that should signal "
        "it do so, on this device (device_id) and on this semaphore, as many times as "
        "you wait for?"),
    "semaphore_left": (
        "this semaphore still counts signals (under 'left') when the kernel ends: a "
        "signal that no pl.semaphore_wait took. A TPU requires every semaphore back at "
        "zero at the end of a kernel; wait for every signal you send (the barrier too: "
        "wait for as many signals as your neighbours send you)."),
    "dma_out_of_bounds": (
        "this copy names a part of a ref past its ends (a slice, a slot or a semaphore "
        "index): a TPU would copy the wrong memory or fault. Check the index against "
        "the ref's shape; negative indices do not wrap around in a kernel."),
}


_DMA_OTHER = {"dma_waited_twice": "waited", "dma_shared_semaphore": "also on it",
              "dma_wrong_semaphore": "started"}
_DMA_DETAIL = {"dma_dtype": "dtypes", "dma_shape": "shapes", "remote_before_barrier": "devices",
               "remote_unheard": "devices", "remote_semaphores_swapped": "devices",
               "remote_overwrite": "devices", "remote_shared_semaphore": "devices",
               "semaphore_left": "left"}


def _dma_finding(problem, sources) -> diagnose.Finding:
    def at(eqn) -> str:
        return _line_of(eqn, sources)

    waits = problem.eqn.primitive.name in ("dma_wait", "semaphore_wait")
    signals = problem.eqn.primitive.name == "semaphore_signal"
    facts = [("waits" if waits else "signals" if signals else "started", at(problem.eqn))]
    if problem.other is not None:
        facts.append((_DMA_OTHER.get(problem.kind, "in flight"), at(problem.other)))
    if problem.detail:
        facts.append((_DMA_DETAIL.get(problem.kind, "window"), problem.detail))
    return diagnose.Finding(problem.kind, _DMA_SAYS[problem.kind], facts=facts)


def moved_bytes(fn: Callable, *args, **static):
    """Runs ``fn(*args, **static)`` once and returns the bytes its kernels move
    (``traffic.Traffic``)."""
    return measure(fn, *args, structure=None, **static).traffic


def check_structure(fn: Callable, *args, structure: Structure, **static) -> None:
    """Traces ``fn(*args, **static)`` and checks its ``structure``, without running it."""
    _check_structure(_trace(fn, args, static), structure)


def _check_structure(traced, structure: Structure) -> None:
    from . import chapters

    jaxcompat.require("structure checks")
    with kit_step("structure checks"):
        findings = structure_findings(traced, structure, chapters.sources())
    if findings:
        raise Diagnosed("", findings=findings)


def run(fn: Callable, *args, structure: Structure | None, **static):
    """``fn(*args, **static)``, run once as one compiled program that must have the
    ``structure`` its puzzle's lesson requires."""
    return measure(fn, *args, structure=structure, **static).output


_PLAIN_JAX = Structure(kernels=None, outside=frozenset())


def run_jax(fn: Callable, *args, **static):
    """``fn(*args, **static)`` compiled as one program, for the puzzles written in plain
    JAX (no kernel needed; host callbacks are not allowed either)."""
    from . import projection

    if projection.active():
        raise projection.Projected([])
    traced = _trace(fn, args, static)
    with kit_step("structure checks"):
        findings = structure_findings(traced, _PLAIN_JAX.where(kernels=len(traced.sites)))
    if findings and findings[0].kind in ("callback", "foreign_kernel"):
        raise Diagnosed("", findings=findings)
    try:
        return program.execute(traced, args)[0]
    except Exception as error:
        _blame(error, "running the program")
        raise program.learners(error)


def _locate(error: BaseException, traced) -> None:
    """Attaches the learner's line the error most likely comes from (a run-time error
    in a kernel has no learner frame in its traceback)."""
    from . import chapters

    try:
        error.pallas_where = program.site_of(traced, error, chapters.sources())
    except Exception:
        pass
    try:   # the grids and their semantics, for an error that depends on them (a revisit)
        error.pallas_kernels = [(site.call.name, tuple(site.call.grid),
                                 tuple(site.call.semantics)) for site in traced.sites]
    except Exception:
        pass


def _trace(fn, args, static) -> program.Program:
    return program.trace(fn, args, {name: _own_copy(value) for name, value in static.items()},
                         reading=lambda: kit_step("reading the program"))


def _own_copy(value):
    """A static argument as the learner's code gets it: NumPy arrays copied, so that no
    write into one (a mask sorted in place) reaches the test's own."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if type(value) in (list, tuple):
        return type(value)(_own_copy(v) for v in value)
    if type(value) is dict:
        return {k: _own_copy(v) for k, v in value.items()}
    return value


_MACHINERY_RAN: list[bool] = []   # a known-good kernel ran here once: the kit works


def _machinery_error() -> str | None:
    """Whether a known-good kernel runs here: if not, the kit is what is broken. The
    simulated TPU is reset first (a learner's failed kernel leaves it dirty, and the
    known-good kernel would hit the same error); only a failure in a clean state is the
    kit's, and a success is remembered."""
    import jax
    from jax.experimental import pallas as pl

    if _MACHINERY_RAN:
        return None

    def twice_kernel(x_ref, o_ref):
        o_ref[...] = 2 * x_ref[...]

    def twice(x):
        return pl.pallas_call(twice_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    jaxcompat.reset_interpreter()
    jaxcompat.drop_failed_tokens()
    try:
        x = np.ones((8, 128), np.float32)
        with jaxcompat.without_mesh():
            output, _ = program.execute(program.trace(twice, (x,), {}), (x,))
        if not np.array_equal(np.asarray(output), 2 * x):
            return "a known-good kernel gave a wrong value"
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    _MACHINERY_RAN.append(True)
    return None


def _blame(error: BaseException, step: str) -> None:
    """Re-raises ``error`` as a KitError when a known-good kernel fails too, in a clean
    state: a kit problem is proven before it is called one. A run that ran out of time is
    never tried again here: its kernel may still be waiting (runtime.watch ends it)."""
    from .runtime import KernelTimeout

    if isinstance(error, (*_VERDICTS, KernelTimeout)) or jaxcompat.race_in(error):
        return
    broken = _machinery_error()
    if broken is not None:
        raise KitError(step, error) from error


# -------------------------------------------------------------------- checks ---

def check(yours, expected, *, blocks=None, axes: str | None = None,
          likely: Mapping[str, object] | None = None, tolerance: float | None = None,
          name: str = "output") -> None:
    """Passes if ``yours`` has the shape, dtype and values of ``expected``.

    blocks:    the output's block shape (None for a full dim), for the block map;
    axes:      a letter per output dim for the block map's labels, e.g. "B N T H";
    likely:    known wrong answers, name -> array (or a function returning one,
               evaluated only on failure); a match is named by the puzzle's words;
    tolerance: relative tolerance, default by dtype (TOLERANCE).
    """
    carries = narrow = stored = gridless = None
    measured = yours if isinstance(yours, Measured) else None
    if measured is not None:   # what its kernels carry from step to step, if anything
        # The blocks of a Mosaic GPU grid run in parallel: nothing is carried from one to
        # the next, whatever a block's own loops carry.
        carries = any(carried_state(site.call) for site in measured.program.sites
                      if getattr(site.call, "backend", "") != "mosaic_gpu")
        sites = measured.program.sites
        gridless = bool(sites) and not any(site.call.grid for site in sites)
        narrow = _narrow_floats(measured.program.closed.jaxpr)
        yours = measured.output
    yours_np, expected_np = np.asarray(yours), np.asarray(expected)
    if tolerance is None:
        tolerance = TOLERANCE.get(expected_np.dtype.name, 0.0)
    if (yours_np.shape == expected_np.shape and yours_np.dtype == expected_np.dtype
            and diagnose.close(yours_np, expected_np, tolerance).all()):
        return
    if measured is not None and _all_nan(yours_np):   # never stored, or NaN stored?
        stored = measured.stores_an_output()
    raise Mismatch(yours_np, expected_np, name=name, blocks=blocks, axes=axes,
                   likely=likely, tolerance=tolerance, carries=carries, narrow=narrow,
                   stored=stored, gridless=gridless)


def _narrow_floats(jaxpr) -> bool:
    """Whether any value of the program (its kernels included) is bf16 or f16."""
    return any(str(getattr(getattr(v, "aval", None), "dtype", "")) in ("bfloat16", "float16")
               for eqn in jaxcompat.equations(jaxpr)
               for v in list(eqn.invars) + list(eqn.outvars))


def _all_nan(a: np.ndarray) -> bool:
    try:
        return bool(a.size) and bool(np.isnan(a.astype(np.float64)).all())
    except (TypeError, ValueError):
        return False


def check_work(measured: Measured, *, flops: int, likely: Mapping[str, int] | None = None,
               wrong: Mapping[str, tuple[int, int]] | None = None, says: str = "",
               moving: bool = True) -> None:
    """Passes if the kernels executed exactly ``flops`` flops of dots, every one of them
    multiplying data and moving the output (``Measured.used_work``).

    likely: known wrong amounts, name -> flops (e.g. "every_block": the work of a
            kernel that skips nothing); a match is named by the puzzle's words;
    wrong:  known wrong schedules, name -> (flops, bytes moved): one is named only when
            both its numbers are yours and no other schedule, right or known wrong, has
            the same pair (one number alone can belong to two mistakes);
    says:   the sentence when more work was done than needed (the default names it);
    moving: False where ``flops`` counts a product that cannot move this configuration's
            output (one token: a product below the diagonal reaches padding rows only),
            so that no dot is asked to.
    """
    if wrong:
        pairs, moved = list(wrong.values()), measured.traffic.total
        likely = dict(likely or {})
        likely.update({name: work for name, (work, nbytes) in wrong.items()
                       if work != flops and pairs.count((work, nbytes)) == 1
                       and nbytes == moved})
    yours, used = measured.work, measured.reaching_work
    facts = [("work", f"dot flops executed: yours {yours:,} · needed {flops:,}"
                      + (f" ({yours / flops:.3g} ×)" if flops else ""))]
    # The work of a known wrong answer, exactly, says more than "unused" does: the
    # puzzle's words for it name the mistake (padding steps computed and dropped).
    for name, amount in (likely or {}).items():
        if yours == amount and yours != flops:
            raise Diagnosed(name, f"your kernels do the work of a known wrong answer "
                                  f"({name.replace('_', ' ')}).", facts)
    if used == yours and yours == flops and moving:
        _check_work_moves(measured)
    if used < yours:
        raise Diagnosed("work_unused", (
            f"{yours - used:,} of the {yours:,} dot flops your kernels execute compute "
            "results that never reach an output (multiplied by zero, dropped by a "
            "jnp.where, added and subtracted again, overwritten, or never stored): only work whose result is used "
            "counts. Compute each product the result needs, and use it."),
            [("work", f"dot flops executed: {yours:,} · reaching an output: {used:,} · "
                      f"needed {flops:,}")])
    # After the dots' own verdicts: a decoy dot is named as one; a dot that moves the
    # output beside a VPU product that does the work is named here.
    check_products_on_the_mxu(measured, flops)
    if yours == flops:
        return
    if yours > flops:
        raise Diagnosed("work_high", says or (
            "your kernels execute more dot flops than the result needs, and every one of "
            "them reaches an output. Are blocks computed whose every value is then masked "
            "or lies outside the array (skip them with pl.when)? Or does your algorithm "
            "take more products than the one the docstring describes?"), facts)
    raise Diagnosed("work_low", (
        "your kernels compute less than the result needs: some blocks are skipped that "
        "hold visible values, or a dot is missing."), facts)


OUTER_SHARE = 0.05   # of the needed dot flops: a mask or a decay built as an outer
#                      product is a few percent at the kit's smallest head size


def check_products_on_the_mxu(measured: Measured, flops: int) -> None:
    """Part of ``check_work``, and alone where a puzzle counts no flops: ``flops``, the
    work the result needs. The products are the dots': multiplies that are a matmul written elementwise
    (``products``: outer products, or a vector times a matrix summed on the VPU) stay
    under ``OUTER_SHARE`` of the work, whatever share of the result the dots make."""
    elements = measured.outer_products
    if flops and 2 * elements > OUTER_SHARE * flops:
        raise Diagnosed("vpu_products", (
            f"your kernels multiply {elements:,} pairs elementwise in a pattern that is a "
            "matrix product: an outer product (a[:, :, None] * b[None, :, :], or a column "
            "times a row summed in a loop) or a vector times a matrix summed with jnp.sum. "
            "That is the MXU's work done one multiply at a time on the vector units; a dot "
            "mixed in beside it does not change who did the work. Write each product as "
            "one jnp.dot (or lax.dot_general) of the blocks."),
            [("work", f"dot flops executed: {measured.work:,} · needed {flops:,} · "
                      f"elementwise products shaped like a matmul: {2 * elements:,} flops")])


def _check_work_moves(measured: Measured) -> None:
    """Every dot whose result reaches an output multiplies data and moves the output:
    run again with a dot's result doubled in half its elements, the output changes
    (``Measured.idle_dots``). Checked where the work's amount is right, so that the
    other verdicts, which need no second run, come first."""
    yours, constant = measured.work, measured.constant_work
    if constant:
        raise Diagnosed("work_unused", (
            f"{constant:,} of the {yours:,} dot flops your kernels execute multiply by a "
            "matrix your kernel builds from no input (from iota or constants, an identity "
            "for instance): a product with it only moves values that were computed "
            "elsewhere. The dots are the work: multiply the blocks of the inputs."),
            [("work", f"dot flops executed: {yours:,} · with an operand built from no "
                      f"input: {constant:,}")])
    idle = yours - measured.used_work
    if idle > 0:
        raise Diagnosed("work_unused", (
            f"{idle:,} of the {yours:,} dot flops your kernels execute do not move the "
            "output: the kit ran your kernels again with those dots' results doubled in "
            "half their elements, and every output came out the same. A result scaled "
            "until it rounds away (or is zero: doubling 0 leaves 0), or one that a select "
            "or a maximum never picks, "
            "computes nothing the result needs. Let the dots compute the products, and "
            "use them."),
            [("work", f"dot flops executed: {yours:,} · moving the output when "
                      f"perturbed: {measured.used_work:,}")])


def check_vmem(measured: Measured, *, most: int, why: str) -> None:
    """Passes if every kernel takes at most ``most`` bytes of VMEM, counted from every
    allocation (``footprint.vmem``: BlockSpec'd operands double-buffered, scratch, and
    ``pl.run_scoped`` buffers); ``why`` says what the puzzle's schedule needs."""
    from .footprint import _size

    for found in measured.vmem:
        if found.total > most:
            raise Diagnosed("vmem", (
                f"your kernel {found.kernel}() takes {_size(found.total)} of VMEM, where the "
                f"puzzle's schedule needs {_size(most)}: {why} Every buffer counts: "
                "scratch_shapes, pl.run_scoped buffers, and two buffers per BlockSpec'd "
                "operand."), [("vmem", f"yours {found.total:,} B · the puzzle's {most:,} B"),
                              ("largest", found.largest())])


def check_overlap(measured: Measured, *, work: str, at_least: int, why: str,
                  remote: bool = False) -> None:
    """Passes if the kernels ran ``work`` (a primitive: "reduce_sum", "dot_general") at
    least ``at_least`` times while a DMA whose data is used was in flight (``walk.Counts.
    carrying``): overlap is compute done while the data a later step needs moves, not
    copies started together, nor a copy nobody reads started around the compute.
    ``remote``: a copy between devices (a dot only), where the lesson hides the
    interconnect's time: a local staging copy moves nothing across chips."""
    overlapped = sum(counts.carrying(work, remote) for counts in measured.counts)
    executed = sum(counts.executed.get(work, 0) for counts in measured.counts)
    if overlapped < at_least:
        what = WORDS.get(work, work)
        raise Diagnosed("not_overlapped", (
            f"your kernel computes while no copy is in flight: {what} ran {overlapped} of "
            f"{executed} times with a {'copy between devices' if remote else 'DMA'} under "
            "way whose data the kernel then uses, where "
            f"the puzzle's schedule overlaps {at_least}. {why}"),
            [("overlap", f"{work} during a copy whose data is used: yours {overlapped} of "
                         f"{executed} · the puzzle's schedule {at_least}")])


def check_blocks(measured: Measured, *, name: str = "output", sites=None, **shapes) -> None:
    """Passes if every kernel operand that is one of the measured function's arguments
    moves in blocks of the shape given for it: ``check_blocks(ran, x=(8, 128))``, or a
    list of the shapes allowed. Operands are found by identity (``Structure.blocks``),
    whatever their position; ``sites``: only these kernels (``measured.program.sites``'
    items); ``name``: the output the finding is about (its words: "blocks_shape:name")."""
    with kit_step("checking blocks"):
        for label, allowed in shapes.items():
            findings = blocks_of(measured.program, label, allowed, sites=sites)
            if findings:
                break
        else:
            return
    failure = Diagnosed("", findings=findings)
    failure.name = name
    raise failure


def check_rejects(function: Callable, cases, *, advice: str = "",
                  kind: str = "bad_arguments") -> None:
    """Each case ``(why, args, static, names)`` must make ``function(*args, **static)``
    raise a ValueError whose message names one of ``names`` (the argument at fault;
    None: any ValueError), before any kernel is built: traced, not run. ``advice``: a
    sentence for the learner when it does not (how the chapter checks its arguments);
    ``kind``: the finding's kind, for the hints file's words."""
    import re

    import jax

    name = getattr(function, "__name__", "the function")

    def describe(value):   # an array by its shape and dtype; a dtype (np.float16) by repr
        if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, type):
            return f"{tuple(value.shape)} {value.dtype}"
        return repr(value)

    tail = f" {advice}" if advice else ""
    for why, args, static, names in cases:
        shown = ", ".join([*map(describe, args),
                           *(f"{k}={describe(v)}" for k, v in static.items())])
        wanted = f"a ValueError naming {' or '.join(names)}" if names else "a ValueError"
        try:
            jax.eval_shape(functools.partial(function, **static), *args)
        except ValueError as error:
            if names is None or any(re.search(rf"\b{n}\b", str(error)) for n in names):
                continue
            fail(kind, (
                f"{name}({shown}) raised a ValueError that does not name "
                f"{' or '.join(names)}. Check the arguments first ({why}) and say in the "
                f"message which one is wrong.{tail}"),
                [("raised", raised(error, kind=False))])
        except NotImplementedError:
            raise
        except Exception as error:
            fail(kind, (
                f"{name}({shown}) should raise {wanted} before any kernel is built ({why}); "
                f"it failed later, inside JAX or your kernels, with another error.{tail}"),
                [("raised", raised(error))])
        else:
            fail(kind, (
                f"{name}({shown}) should raise {wanted} ({why}); it raised nothing.{tail}"),
                [("call", f"{name}({shown})")])


class TooMuchTraffic(AssertionError):
    """A kernel that moves more bytes between HBM and VMEM than its budget, or fewer
    than the inputs its result depends on."""

    def __init__(self, yours, reference: int, minimum: int | None, outside: int | None = None,
                 too_little: bool = False, over_share=None):
        self.yours, self.reference, self.minimum, self.outside = yours, reference, minimum, outside
        self.too_little = too_little
        self.over_share = over_share   # (operand name, kernel, bytes read, its share, copies)
        super().__init__(f"bytes moved: yours {yours.total} (+ {yours.outside} outside "
                         f"kernels), reference {reference}, minimum {minimum}")

    def findings(self) -> list[diagnose.Finding]:
        from .traffic import mib

        sizes = [self.yours.total, self.reference] + (
            [self.minimum] if self.minimum is not None else [])
        shown = mib(*sizes)
        moved = f"yours {shown[0]} · reference {shown[1]}" + (
            f" · minimum {shown[2]}" if len(shown) > 2 else "")
        facts = [("bytes", f"moved by kernels: {moved}")]
        if self.too_little:
            return [diagnose.Finding("traffic_low", (
                "your kernels move fewer bytes than the result depends on: a kernel that "
                "does not read all of its inputs cannot have computed the answer from "
                "them. Does every input go through a BlockSpec or a DMA?"), facts=facts)]
        if self.outside is not None and self.yours.outside > self.outside:
            facts.append(("outside", f"plus {mib(self.yours.outside)} by JAX ops outside "
                                     f"your kernels: {_biggest(self.yours.outside_ops, mib)}"))
            return [diagnose.Finding("traffic", (
                "part of the work happens outside your kernels, in separate JAX ops "
                "that each read and write HBM: move it into the kernel, so the data "
                "makes one trip."), facts=facts)]
        per_kernel: dict[str, int] = {}
        for op in self.yours.operands:
            per_kernel[op.kernel] = per_kernel.get(op.kernel, 0) + op.bytes
        if len(per_kernel) > 1:
            facts.append(("kernels", " · ".join(
                f"{k} {v}" for k, v in zip(per_kernel, mib(*per_kernel.values())))))
        worst = max(self.yours.operands, key=lambda o: o.bytes / max(o.array_bytes, 1))
        times = worst.bytes / max(worst.array_bytes, 1)
        if self.over_share is not None:
            name, kernel, moved, share, copies = self.over_share
            shown = mib(moved, share)
            facts.append(("most", f"{name} in {kernel}: read {shown[0]} in {copies} copies, "
                                  f"{shown[1]} expected"))
            return [diagnose.Finding("traffic", (
                f"{name} moves {moved / share:.3g} times the bytes it needs: its blocks are "
                "bigger than the work needs, or fetched more often (a block is fetched "
                "again whenever its index map returns another block than at the step "
                "before). Check its block shape and its index map."),
                facts=facts, detail=name)]
        if times > 1.01:
            facts.append(("most", f"{worst.name} in {worst.kernel}: {worst.direction} "
                                  f"{mib(worst.bytes)} in {worst.copies} copies, "
                                  f"{times:.3g} × its size"))
            says = (f"{worst.name} moves {times:.3g} times its size: keep a block in VMEM "
                    "while it is needed (its index map returns the same block on "
                    "consecutive steps), or choose blocks that reuse it more.")
        else:
            says = ("more data moves than the work needs: an intermediate result makes a "
                    "round trip through HBM? Fuse the steps into one kernel, and fetch no "
                    "block whose result is not needed.")
        return [diagnose.Finding("traffic", says, facts=facts)]


def check_traffic(measured, *, reference: int, minimum: int | None = None,
                  outside: int | None = None, shares=()) -> None:
    """Passes if the kernels moved between ``minimum`` and ``reference`` bytes.

    reference: the bytes a good solution's kernels move (computed by hand in the test);
    minimum:   the bytes the result depends on (each needed input block read once,
               each output written once): moving fewer means inputs were ignored;
    outside:   if given, the most bytes JAX ops outside the kernels may move (0: all
               the work must happen in kernels);
    shares:    (argument, bytes) pairs: what a good solution reads from each of these
               arguments (the parts of ``reference``). Over budget, the diagnosis names
               the argument read furthest past its share, not the operand copied most
               times its size (which a good solution may do by design: a filter block
               fetched once per tile).
    """
    yours = measured.traffic if isinstance(measured, Measured) else measured
    if yours.total > reference or (outside is not None and yours.outside > outside):
        over = _over_share(measured, shares) if isinstance(measured, Measured) else None
        raise TooMuchTraffic(yours, reference, minimum, outside, over_share=over)
    if minimum is not None and yours.total < minimum:
        raise TooMuchTraffic(yours, reference, minimum, outside, too_little=True)


def _over_share(measured: "Measured", shares):
    """(operand name, kernel, bytes read, share, copies) of the argument read furthest
    past its share, or None when none is read past it."""
    worst = None
    for array, share in shares:
        moved = measured.bytes_from(array, "read")
        if moved > share * 1.001 and (worst is None or moved / share > worst[2] / worst[3]):
            mine = {(site.index, n) for site, n in measured._operands_from(array)}
            ops = [op for op in measured.traffic.operands
                   if (op.site, op.operand) in mine and op.direction == "read"]
            if ops:
                worst = (ops[0].name, ops[0].kernel, moved, share, sum(o.copies for o in ops))
    return worst


def _biggest(ops, mib, shown: int = 3) -> str:
    """'add 96 KiB · broadcast_in_dim 33 KiB': the ops that moved the most."""
    ops = sorted(ops, key=lambda o: -o.bytes)
    text = " · ".join(f"{o.name} {mib(o.bytes)}" for o in ops[:shown])
    return text + (f" and {len(ops) - shown} more" if len(ops) > shown else "")


class LoweringFailed(AssertionError):
    """The kernel runs in interpret mode but would not compile for a TPU."""

    def __init__(self, error: BaseException, where: tuple[str, int] | None = None):
        self.error, self.pallas_where = error, where
        super().__init__(f"does not lower for TPU: {error}")


def lowers_for_tpu(target, *args, **static) -> None:
    """Passes if the program lowers for a real TPU (Mosaic), on this machine.

    ``target`` is a ``Measured`` (its program is lowered: no second trace) or a
    function, traced here with ``args`` and ``static``. The real TPU compiler
    front end, run on CPU, rejects for example block shapes whose last two dims
    are not multiples of (8, 128).
    """
    from . import compile_cache

    if isinstance(target, Measured):
        traced, args = target.program, target.args
    else:
        traced = _trace(target, args, static)
    with kit_step("TPU lowering check"):
        mark = compile_cache.passed_before("lowers_for_tpu", traced.describe())
    if mark is not None and mark.exists():
        return  # this exact program lowered in an earlier run
    try:
        program.lower_for_tpu(traced, args)
    except (AssertionError, ChapterImportError):
        raise   # (a NotImplementedError here is Mosaic's, not a stub's: the code ran already)
    except Exception as error:
        if "Unsupported TPU device kind" in str(error):
            return  # a rule this JAX can only check on a real TPU
        if _lowering_error() is not None:
            raise jaxcompat.CannotVerify("TPU lowering check", _lowering_error()) from error
        from . import chapters

        raise LoweringFailed(error, program.site_of(traced, error, chapters.sources())) \
            from error
    compile_cache.record(mark)


@functools.lru_cache(maxsize=None)
def _lowering_error() -> str | None:
    """Whether a known-good kernel lowers for TPU here."""
    import jax
    from jax.experimental import pallas as pl

    if "TPU lowering check" in jaxcompat.missing():
        return jaxcompat.missing()["TPU lowering check"]

    def copy_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def copy(x):
        return pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    x = np.zeros((8, 128), np.float32)
    try:
        with jaxcompat.without_mesh():
            program.lower_for_tpu(program.trace(copy, (x,), {}), (x,))
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None


# -------------------------------------------------------------------- inputs ---

class Rng:
    """Inputs for one test, drawn from a seed derived from the session's seed and the
    test's id: fresh every session, the same for a test whenever the session seed is
    (``pytest --seed N`` replays a run)."""

    def __init__(self, seed: int, session_seed: int | None = None):
        self.seed, self.session_seed = seed, session_seed
        self._gen = np.random.default_rng(seed)

    @classmethod
    def for_test(cls, test_id: str, session_seed: int = 0) -> "Rng":
        return cls(zlib.crc32(f"{session_seed}:{test_id}".encode()), session_seed)

    def normal(self, shape, dtype="float32", scale: float = 1.0) -> np.ndarray:
        return _as(self._gen.standard_normal(shape) * scale, dtype)

    def uniform(self, shape, low: float = 0.0, high: float = 1.0, dtype="float32"):
        return _as(self._gen.uniform(low, high, shape), dtype)

    def integers(self, shape, low: int, high: int, dtype="int32"):
        return _as(self._gen.integers(low, high, shape), dtype)

    def permutation(self, n: int) -> np.ndarray:
        return self._gen.permutation(n)


def _as(values, dtype) -> np.ndarray:
    import jax.numpy as jnp  # knows "bfloat16"

    return np.asarray(values).astype(jnp.dtype(dtype))
