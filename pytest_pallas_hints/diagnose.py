"""The diagnosis engine: pure functions from a failure to findings.

``compare(yours, expected, ...)`` looks at two arrays; ``explain(error, ...)``
looks at an exception. Both return ``Finding``s, most specific first. A
finding has a ``kind`` (a stable word that hints files attach their own
sentences to), the facts it rests on (rows such as ``shape`` or ``blocks``),
and the engine's own sentence, used when the puzzle has none for that kind.

Nothing here knows about pytest; ``render`` turns findings into the text the
plugin prints.
"""
from __future__ import annotations

import dataclasses
import math
import re
import textwrap
from pathlib import Path

from .frozen import np

LABEL_WIDTH = 11
WRAP = 78


@dataclasses.dataclass
class Finding:
    kind: str
    says: str = ""
    facts: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    where: str = ""  # "exercises/basics.py:12" when a source line is known
    detail: str = ""  # what exactly: the primitive of an "outside" finding
    alike: list[str] = dataclasses.field(default_factory=list)  # kinds this input cannot
    # tell from this one (each a known wrong answer the output equals as well)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Finding":
        return cls(kind=data["kind"], says=data["says"],
                   facts=[tuple(f) for f in data["facts"]], where=data["where"],
                   detail=data.get("detail", ""), alike=list(data.get("alike", [])))


# ---------------------------------------------------------------- arrays ---

def close(yours: np.ndarray, expected: np.ndarray, tolerance: float) -> np.ndarray:
    """Elementwise: within ``tolerance`` relative to the value and to the largest |expected|."""
    y, e = _f64(yours), _f64(expected)
    scale = float(np.max(np.abs(e), initial=0.0)) or 1.0
    with np.errstate(invalid="ignore", over="ignore"):   # inf - inf is not close: NaN
        return np.abs(y - e) <= tolerance * (np.abs(e) + scale)


def compare(yours: np.ndarray, expected: np.ndarray, *, name: str = "output", blocks=None,
            axes: str | None = None, likely: dict | None = None,
            tolerance: float = 2e-5, carries: bool | None = None,
            narrow: bool | None = None, stored: bool | None = None,
            gridless: bool | None = None) -> list[Finding]:
    """How ``yours`` differs from ``expected``, most specific finding first. ``carries``:
    whether the kernels carry state from step to step; ``narrow``: whether the program
    holds any bf16 or f16 value; ``stored``: whether any grid step stored into an output
    (None: not known); ``gridless``: whether every kernel has no grid (its own stores
    write every block: no advice about grids or index maps)."""
    shape_row = ("shape", f"expected {_shape(expected)} · yours {_shape(yours)}")
    if yours.shape != expected.shape:
        return [_shape_finding(yours, expected, shape_row)]

    findings: list[Finding] = []
    facts = [shape_row]
    if yours.dtype != expected.dtype:
        findings.append(Finding("dtype", (
            f"{name} should be {expected.dtype} but is {yours.dtype}: out_shape's dtype "
            "sets the output's dtype, and a value is cast with .astype(o_ref.dtype) "
            "before it is stored.")))
    bad = ~close(yours, expected, tolerance)
    if not bad.any():
        if findings:
            findings[0].facts = facts
        return findings

    y, e = _f64(yours), _f64(expected)
    grid = _BlockGrid(expected.shape, blocks, axes) if blocks is not None else None
    nan = np.isnan(y) & ~np.isnan(e)
    tail = grid.tail_axis(bad) if grid is not None else None
    facts += _error_rows(y, e, bad, nan, grid)

    matched = [key for key, wrong_answer in (likely or {}).items()
               if wrong_answer.shape == expected.shape
               and _agrees(y, _f64(wrong_answer), tolerance)]
    if matched:   # shown: the output is that mistake's output (on this input, each of them)
        findings.insert(0, Finding(matched[0], f"your {name} matches a known wrong answer "
                                               f"({matched[0].replace('_', ' ')}).",
                                   alike=matched[1:]))
    if grid is not None and not nan.any() and grid.carried(y, e, tolerance):
        findings.append(Finding("carried", (
            "each output block starts where the previous one ended: the accumulator is "
            "not reset when a new output block begins. Zero it whenever the reduction "
            "axis starts over (pl.program_id(r) == 0 for the reduction axis r, whatever "
            "the other axes), not only at the very first grid step.")))
    if nan.any():
        findings.append(_nan_finding(nan, bad, grid, tail, stored, gridless))
    if not np.any(y) and np.any(e):
        findings.append(Finding("zeros", (
            f"your {name} is all zeros: was anything stored, and was it stored after the "
            "value was computed (not before the loop or the pipeline that fills it)? A "
            "kernel writes its result with o_ref[...] = value.")))
    factor = _constant_factor(y, e, tolerance)
    if factor is not None:
        named = _name_factor(factor)
        if _simple_factor(factor):   # a whole number, its inverse, a square root
            asked = "A scale applied twice, or not at all?"
        else:   # no simple scale explains it: say so, and ask what could
            asked = ("No simple scale is that factor (a whole number, its inverse, a square "
                     "root): was a normaliser (a sum, a max) computed over other terms than "
                     "expected" + (", or rounded to a narrow float on the way" if narrow
                                   is not False else "") + "?")
        findings.append(Finding("scaled", (
            f"right up to a constant factor: yours = {named} × expected. {asked}"),
            facts=[("factor", f"yours = {named} × expected")]))
    rows = _row_factors(y, e, tolerance) if factor is None else None
    if rows is not None:
        low, high = float(rows.min()), float(rows.max())
        findings.append(Finding("row_scaled", (
            f"each row of your {name} is right up to a factor of its own (from {low:.3g} "
            f"to {high:.3g}): a normalisation that disagrees with what it normalises, or "
            "rows that summed or averaged a different set of values than expected (rows "
            "read from the wrong place, terms missing or counted twice)."),
            facts=[("rows", f"yours = c × expected per row, c from {low:.3g} to {high:.3g}")]))
    offset = _constant_offset(y, e, tolerance)
    if offset is not None and factor is None:
        shown = f"expected {'+' if offset > 0 else '-'} {abs(offset):.4g}"
        findings.append(Finding("offset", (
            f"right up to a constant: yours = {shown} everywhere. A term added once too "
            "often, or a wrong initial value?"), facts=[("offset", f"yours = {shown}")]))
    if _looks_transposed(y, e, tolerance):
        findings.append(Finding("transposed", (
            f"your {name} equals the transpose of the expected one: are the grid axes or "
            "an index map's (i, j) swapped, or the two operands of a matmul?")))
    if tail is not None and not nan.any():
        findings.append(Finding("tail", (
            f"only the last block along dim {tail} is wrong, the one that hangs off the "
            "end of the array. Its out-of-range part holds garbage: does some of it mix "
            "with real values (a reduction over that dim, a max or a sum; mask it with "
            "iota + program_id before it does)? Or does that block differ in another way, "
            "a step only it takes, a size or an offset of its own?")))
    side, width = _diagonal_side(bad)
    if side and width == 1:
        findings.append(Finding(f"{side}_diagonal", (
            f"the wrong values sit {'on' if side == 'on' else 'just ' + side} the diagonal "
            "of the last two dims, one wide: is a mask comparing rows and columns off by "
            "one (< against <=)?")))
    elif side:
        findings.append(Finding(f"{side}_diagonal", (
            f"the wrong values sit {side} the diagonal of the last two dims, in a band "
            f"{width} wide that starts at it: does the mask compare rows and columns the "
            "right way, from the right place (where its diagonal starts, a bound on the "
            "other side)?")))
    integers = np.issubdtype(np.asarray(yours).dtype, np.integer) \
        and np.issubdtype(np.asarray(expected).dtype, np.integer)
    if integers and not side and bad.any() and np.abs(y - e).max() <= 1:
        findings.append(Finding("off_by_one", (
            f"your {name}'s integers are off by exactly 1 where they differ, in "
            f"{int(bad.sum())} of {bad.size} values: a rounding that differs from the "
            "expected one? jnp.round rounds to nearest (halves to even); jnp.floor, "
            "jnp.trunc and a cast to an integer dtype (toward zero) do not. Or a bound "
            "(a clip, a range) one off?")))
    rounding = _rounding(y, e, bad, nan, grid, tolerance) \
        if not side and narrow is not False and not integers else None
    if rounding is not None:
        findings.append(rounding)
    later = grid.later_only(grid.wrong(bad)) if grid is not None and not side else None
    if later is not None:
        findings.append(_later_blocks(later, grid.axes[later], carries))
    # Blocks right only because nothing was expected there (all zeros: keys no query
    # sees) tell nothing of which program ids are at fault.
    if grid is not None and 0 < grid.wrong(bad).sum() < grid.count \
            and (~grid.wrong(bad) & grid.wrong(e != 0)).any():
        findings.append(Finding("blocks", (
            "only some output blocks are wrong: compare the program ids of the wrong "
            "blocks with the right ones (an index map, or a pl.when condition).")))
    findings.append(Finding("values", f"the values of {name} are wrong."))
    findings[0].facts = facts + findings[0].facts
    return findings


def _agrees(y: np.ndarray, wrong: np.ndarray, tolerance: float) -> bool:
    """``y`` is the known wrong answer: close to it, NaN where it has NaN (a 0 / 0 of
    the wrong kernel)."""
    both = np.isnan(y) & np.isnan(wrong)
    return bool(close(np.where(both, 0, y), np.where(both, 0, wrong), tolerance).all())


def _later_blocks(dim: int, axis: str, carries: bool | None) -> Finding:
    """The first block along ``dim`` right, every later one wrong."""
    if carries:
        says = (f"the first block along {axis} is right and every later one is wrong. "
                f"Your kernel carries a value from step to step along {axis} (a state or "
                "accumulator in scratch or a loop), and the first step sees it empty: is "
                "what one step hands to the next wrong (updated before it is used, not "
                "updated, updated with the wrong value, reset where it should carry on), "
                "or is it right and a later step reads it wrong (the wrong operand, a "
                "factor missing)?")
    else:
        says = (f"the first block along {axis} is right and every later one is wrong: does "
                f"an index map ignore the grid axis of {axis} (every step reading or "
                "writing block 0), or does a step use a value that only the first step "
                "gets right?")
    return Finding("later_blocks", says, detail=axis)


def _shape_finding(yours, expected, shape_row) -> Finding:
    # Square last two dims read the same swapped: then the difference lies elsewhere.
    if (yours.ndim == expected.ndim >= 2 and yours.shape[-2:] == expected.shape[-1:-3:-1]
            and yours.shape[-2:] != expected.shape[-2:]):
        return Finding("transposed", (
            "your output has the last two dims swapped: check out_shape, and the order "
            "of the grid axes against the index maps."), [shape_row])
    return Finding("shape", (
        "the output shape is wrong: out_shape decides it (and any reshape after "
        "the pallas_call)."), [shape_row])


def _nan_finding(nan: np.ndarray, bad: np.ndarray, grid, tail: int | None,
                 stored: bool | None = None, gridless: bool | None = None) -> Finding:
    if nan.all() and stored is False:   # the walk saw no store: a puzzle may say why
        return Finding("never_stored", (
            "every value is NaN, and no grid step stored into the output: the store never "
            "ran. Does it sit under a pl.when whose condition never holds (the last step of "
            "another axis: pl.num_programs of the wrong axis?), or in a branch no step "
            "takes?"), detail="no_store")
    if nan.all() and stored:
        return Finding("nan", (
            "every value is NaN, though your kernel stored into the output: the values it "
            "stored were NaN, computed from memory never written. A scratch read before it "
            "was initialised, the part of a block that hangs past the end of an array "
            "(garbage; NaN * 0 is still NaN), or a DMA buffer read before its wait()?"))
    if nan.all():
        return Finding("never_stored", (
            "every value is NaN: nothing was stored into the output, or only values "
            "computed from memory never written. Does the store sit under a pl.when whose "
            "condition never holds (the last step of another axis?), or in a branch no step "
            "takes? Or did the stored value read a scratch before it was initialised, or a "
            "DMA buffer before its wait()?"))
    if tail is not None:
        return Finding("nan", (
            f"the NaNs sit in the last block along dim {tail}, which hangs off the end of "
            "the array. Rows past the end hold garbage (NaN in interpret mode): mask them "
            "with iota + program_id and jnp.where (NaN * 0 is still NaN)."), detail="tail")
    if grid is not None and grid.count > 1:
        wrong = grid.wrong(bad)
        if 0 < wrong.sum() < grid.count and grid.wrong(nan).sum() == wrong.sum() \
                and _whole_blocks(nan, grid, wrong):
            if gridless:   # no grid, no index maps: the kernel's own stores missed them
                return Finding("unwritten", (
                    "some output blocks are entirely NaN: they were never written. Your "
                    "kernel has no grid, so its own stores (or copies) write every block, "
                    "and none reached these (under 'blocks'): does a loop stop a step "
                    "early, or does a block the loop does not cover need a store after "
                    "it?"))
            return Finding("unwritten", (
                "some output blocks are entirely NaN: they were never written. Does the "
                "grid have a step for every output block, and do the output index maps "
                "reach each one?"))
    return Finding("nan", (
        "NaN where a number was expected. Interpret mode fills fresh buffers with NaN, "
        "so this is uninitialised memory: a scratch or output buffer read before it was "
        "written (initialise it under pl.when(... == 0)), or a DMA buffer read before "
        "its wait()."))


def _whole_blocks(nan: np.ndarray, grid, wrong: np.ndarray) -> bool:
    """True when every element of every wrong block is NaN."""
    return int(nan.sum()) == sum(
        int(np.prod([min(b, s - i * b) for i, b, s in zip(ix, grid.blocks, grid.shape)]))
        for ix in np.argwhere(wrong))


def _error_rows(y, e, bad, nan, grid) -> list[tuple[str, str]]:
    def in_blocks(mask) -> str:   # the blocks where these values are
        return (f" in {int(grid.wrong(mask).sum())} of {grid.count} output blocks"
                if grid is not None and grid.count > 1 else "")

    rows = []
    finite = bad & ~nan
    if finite.any():
        diff = np.where(finite, np.abs(y - e), -1.0)
        at = np.unravel_index(int(np.argmax(diff)), diff.shape)
        rows.append(("error", f"max |yours - expected| = {diff[at]:.3g} at "
                              f"{tuple(int(i) for i in at)}; {int(finite.sum())} of "
                              f"{bad.size} values wrong" + in_blocks(finite)))
    if nan.any():
        rows.append(("nan", f"{int(nan.sum())} of {nan.size} values are NaN" + in_blocks(nan)))
    if grid is not None and grid.count > 1:
        rows.append(grid.render_map(grid.wrong(bad)))
    return rows


def _rounding(y, e, bad, nan, grid, tolerance) -> Finding | None:
    """Small errors spread over the output, the size of bf16 rounding: a bf16
    accumulator or statistic, or a dot that rounds to bf16."""
    if nan.any() or not bad.any() or not np.isfinite(y).all():
        return None
    scale = float(np.max(np.abs(e), initial=0.0)) or 1.0
    error = y - e
    worst = float(np.max(np.abs(error))) / scale
    if worst > 0.05 or (grid is not None and grid.count > 1
                        and grid.wrong(bad).sum() * 2 < grid.count):
        return None
    # Rounding to nearest has no direction; a wrong formula (a missing rescale) usually
    # pulls every value the same way, toward zero or away from it.
    bias = float(np.sum(error * np.sign(e))) / (float(np.sum(np.abs(error))) or 1.0)
    if abs(bias) > 0.5:
        return None
    return Finding("rounding", (
        f"the errors are small (at most {worst:.2%} of the largest value) and spread over "
        "the output: they look like bf16 rounding. Is an accumulator or a softmax "
        "statistic kept in bf16, a dot missing preferred_element_type=jnp.float32, or a "
        "value cast to bf16 before the end?"),
        facts=[("size", f"largest error {worst:.2%} of max |expected|; tolerance "
                        f"{tolerance:g}")])


def _constant_factor(y, e, tolerance) -> float | None:
    ee = float(np.vdot(e, e))
    if not np.isfinite(y).all() or ee == 0 or np.ptp(e) == 0:
        return None  # a constant expected value is a multiple of anything
    c = float(np.vdot(y, e)) / ee
    if abs(c - 1) < 1e-3 or c == 0 or not close(y, c * e, max(tolerance, 1e-4) * 2).all():
        return None
    return c


def _row_factors(y, e, tolerance) -> np.ndarray | None:
    """Per row (the last dim), c with yours = c * expected, when every row is such a
    multiple, the c differ, and some are not 1; else None."""
    if y.ndim < 2 or y.shape[-1] < 2 or not np.isfinite(y).all():
        return None
    ys, es = y.reshape(-1, y.shape[-1]), e.reshape(-1, e.shape[-1])
    ee = np.einsum("ij,ij->i", es, es)
    live = ee > 0
    if live.sum() < 2 or np.any(ys[~live]):
        return None
    c = np.einsum("ij,ij->i", ys[live], es[live]) / ee[live]
    if not close(ys[live], c[:, None] * es[live], max(tolerance, 1e-4) * 2).all():
        return None
    off = np.abs(c - 1) > max(tolerance, 1e-4) * 4
    if not off.any() or np.ptp(c) < max(tolerance, 1e-4) * 4:
        return None
    return c


def _constant_offset(y, e, tolerance) -> float | None:
    """c if yours = expected + c everywhere (c not ~0), else None."""
    if y.size < 2 or not np.isfinite(y).all():
        return None
    d = y - e
    c = float(np.mean(d))
    scale = float(np.max(np.abs(e), initial=0.0)) or 1.0
    if abs(c) <= tolerance * scale * 4 or np.ptp(d) > tolerance * scale * 4:
        return None
    return c


def _simple_factor(c: float) -> bool:
    """Whether |c| or 1/|c| is a whole number or the square root of one (a scale a kernel
    applies: 2, 1/8, 1/sqrt(128))."""
    for value in (abs(c), 1 / abs(c)):
        if value < 0.999:
            continue
        for v in (value, value * value):
            if abs(v - round(v)) < 1e-3 * v:
                return True
    return False


def _name_factor(c: float) -> str:
    """0.125 -> '0.125 = 1/8 = 1/sqrt(64)'; 2.0 -> '2'."""
    text = f"{c:.4g}"
    for value, prefix in ((abs(c), ""), (1 / abs(c), "1/")):
        sign = "-" if c < 0 else ""
        if value > 1.001 and abs(value - round(value)) < 1e-3 * value:
            n = round(value)
            name = f"{sign}{prefix}{n}"
            root = f" = {sign}{prefix}sqrt({n * n})" if n >= 8 else ""  # 1/8 = 1/sqrt(64): H?
            return (name if name == text else f"{text} = {name}") + root
        squared = value * value
        if value > 1.001 and abs(squared - round(squared)) < 1e-3 * squared:
            return f"{text} = {sign}{prefix}sqrt({round(squared)})"
    return text


def _looks_transposed(y, e, tolerance) -> bool:
    if y.ndim < 2 or y.shape[-1] != y.shape[-2] or y.shape[-1] < 2:
        return False
    return bool(close(np.swapaxes(y, -1, -2), e, tolerance).all())


def _diagonal_side(bad: np.ndarray) -> tuple[str | None, int]:
    """("above" / "below" / "on", the width of the band of wrong diagonals) when the
    wrong values touch the diagonal from one side; (None, 0) otherwise."""
    if bad.ndim < 2 or min(bad.shape[-2:]) < 2 or bad.all():
        return None, 0
    rows, cols = np.nonzero(bad.reshape(-1, *bad.shape[-2:]).any(axis=0))
    offset = cols - rows  # the wrong values must reach the diagonal, not lie far from it
    if offset.min() == 1:
        return "above", int(offset.max())
    if offset.max() == -1:
        return "below", int(-offset.min())
    if offset.min() == offset.max() == 0:
        return "on", 1
    return None, 0


class _BlockGrid:
    """The output cut into blocks, for the map of which blocks are wrong."""

    def __init__(self, shape, blocks, axes):
        blocks = tuple(shape[d] if b is None else b for d, b in enumerate(blocks))
        self.shape, self.blocks = tuple(shape), blocks
        self.counts = tuple(-(-s // b) for s, b in zip(shape, blocks))
        self.count = math.prod(self.counts)
        self.axes = axes.split() if axes else [f"dim{d}" for d in range(len(shape))]

    def wrong(self, bad: np.ndarray) -> np.ndarray:
        padded = np.zeros([c * b for c, b in zip(self.counts, self.blocks)], dtype=bool)
        padded[tuple(slice(0, s) for s in self.shape)] = bad
        split = []
        for c, b in zip(self.counts, self.blocks):
            split += [c, b]
        return padded.reshape(split).any(axis=tuple(range(1, 2 * len(self.shape), 2)))

    def carried(self, y: np.ndarray, e: np.ndarray, tolerance: float) -> bool:
        """Each block (in grid order) equals its expected value plus the previous block's.

        A partial block (past the array's edge) is compared where both blocks have
        values: the kernel's buffer carried the rest, which the output never shows."""
        if self.count < 2:
            return False
        order = [tuple(slice(i * b, min((i + 1) * b, s))
                       for i, b, s in zip(ix, self.blocks, self.shape))
                 for ix in np.ndindex(*self.counts)]
        wrong_later = False
        for before, now in zip(order, order[1:]):
            common = tuple(min(a.stop - a.start, b.stop - b.start) for a, b in zip(before, now))
            before, now = (tuple(slice(sl.start, sl.start + n) for sl, n in zip(block, common))
                           for block in (before, now))
            if not close(y[now], e[now] + y[before], tolerance).all():
                return False
            wrong_later |= not close(y[now], e[now], tolerance).all()
        return wrong_later

    def later_only(self, wrong: np.ndarray) -> int | None:
        """The dim along which exactly the blocks after the first are wrong, if any."""
        for d, count in enumerate(self.counts):
            if count > 1:
                index = np.arange(count).reshape([-1 if k == d else 1
                                                  for k in range(len(self.counts))])
                if np.array_equal(wrong, np.broadcast_to(index >= 1, wrong.shape)):
                    return d
        return None

    def tail_axis(self, bad: np.ndarray) -> int | None:
        wrong = self.wrong(bad)
        for d, (s, b, c) in enumerate(zip(self.shape, self.blocks, self.counts)):
            if c > 1 and s % b and wrong.any() and not np.take(wrong, range(c - 1), axis=d).any():
                return d
        return None

    def render_map(self, wrong: np.ndarray) -> tuple[str, str]:
        """Rows: blocks along the second-to-last dim; columns: the other dims."""
        rank = len(self.shape)
        row_dim = rank - 2 if rank >= 2 and self.counts[-2] > 1 else None
        col_dims = [d for d in range(rank) if d != row_dim and self.counts[d] > 1]
        table = np.moveaxis(wrong, [d for d in [row_dim] if d is not None], [0]) \
            if row_dim is not None else wrong[None]
        table = table.reshape(table.shape[0], -1)
        if table.shape[0] > 16 or table.shape[1] > 24:
            bad = [tuple(int(i) for i in ix) for ix in np.argwhere(wrong)[:8]]
            return ("blocks", f"wrong blocks (block index per dim): {bad}"
                    + (" ..." if wrong.sum() > 8 else ""))
        if not col_dims and row_dim is not None:  # one tiled dim: a single line
            table, col_dims, row_dim = table.T, [row_dim], None
        cols = "·".join(self.axes[d] for d in col_dims) or "-"
        corner = f"{self.axes[row_dim]}\\{cols}" if row_dim is not None else cols
        width = max(len(corner), len(str(table.shape[0] - 1))) + 1
        lines = [corner.ljust(width) + "".join(f"{j:>3}" for j in range(table.shape[1]))]
        for i, row in enumerate(table):
            label = str(i) if row_dim is not None else ""
            lines.append(label.ljust(width) + "".join(f"{'✗' if w else '✓':>3}" for w in row))
        return ("blocks", "\n".join(lines))


# ------------------------------------------------------------ exceptions ---

def explain(error: BaseException, frames: list[tuple[str, int, str]], root: Path,
            chapter_files: tuple[str, ...] = ("exercises", "reference", "mistakes")) -> Finding:
    """What an exception raised by a test means, pointed at the learner's line.

    ``frames``: (filename, line number, source line) of the traceback, outermost
    first; the innermost frame in a chapter file is the learner's line.
    """
    text = _without_bug_report(f"{type(error).__name__}: {error}")
    where, code = _learner_line(frames, root, chapter_files)
    if getattr(error, "pallas_where", None) and (isinstance(error, AssertionError) or not where):
        where, code = _learner_line([(*error.pallas_where, "")], root, chapter_files)
        code = code or _source_line(error.pallas_where)
    kind = type(error).__name__
    if isinstance(error, NameError):
        typo = _typo(error, where, code, root)
        if typo is not None:
            return typo
    text = _kernel_arg_names(_real_error(text))
    if kind == "NotImplementedError" and where and not _stub_raised(frames, root):
        text = "NotImplementedError (not a stub): " + text[len("NotImplementedError: "):]
    for pattern, name, says in _ERRORS:
        match = re.search(pattern, text, re.S)
        if match:
            groups = [_readable(g) for g in match.groups()]
            if says is _revisited:
                says = _revisited(*groups, kernels=getattr(error, "pallas_kernels", ()))
            else:
                says = says(*groups) if callable(says) else says.format(*groups)
            finding = Finding(name, says, where=where)
            message = _line_at(text, match.start())
            break
    else:
        real = _real_error(str(error))   # the error a callback's traceback ends with
        message = real.splitlines()[0] if real != str(error) and real else \
            f"{kind}: {_line_at(str(error), 0)}"
        finding = Finding("error", message, where=where)
    if finding.kind in _QUIET:
        return finding
    # An error no pattern knows is its own diagnosis ("error"): said once, not twice.
    if finding.kind not in _SELF_EXPLAINED and finding.kind != "error":
        finding.facts.append(("raised", message if len(message) < 300 else message[:297] + "..."))
    if finding.kind == "lowering_primitive":   # for a puzzle's words on one primitive
        finding.detail = groups[0]
    if finding.kind == "lowering":
        mosaic = _mosaic_refusal(text, root, chapter_files)
        if mosaic is not None:
            finding.says, at = mosaic
            if at is not None:
                where, code = at
                finding.where = where
    if finding.kind == "kernel_returns":  # point at the kernel, not at its pallas_call
        found = re.search(r"pallas_call (\w+) at (\S+\.py):(\d+)", text)
        if found:
            where, _ = _learner_line([(found[2], int(found[3]), "")], root, chapter_files)
            finding.where, code = where, f"def {found[1]}(...)"
    if finding.kind == "race":
        gpu = _gpu_race(text, root, chapter_files)
        if gpu is not None:
            return gpu
        # The function is a qualified name: "kernel.<locals>.body" for a fori_loop body.
        sites = re.findall(r"(\S+\.py):(\d+)(?::\d+)? \(([\w.<>]+)\)", text)
        finding.facts.append(("race", "\n".join(
            f"{Path(f).name}:{line} in {fn.rsplit('.', 1)[-1]}()"
            for f, line, fn in dict.fromkeys(sites))))
    elif finding.kind == "broken_chapter":
        rule = type(error).__name__ == "ChapterRuleBroken"
        finding.facts.append(("rule" if rule else "import", str(error)))
        finding.facts += _import_error_at(error, root)
    elif where and code:
        finding.facts.append(("at", f"{where}   {code.strip()}"))
    return finding


def _mosaic_refusal(text: str, root: Path, chapter_files) -> tuple[str, object] | None:
    """What Mosaic (the TPU compiler) refused, in words: the operation, the line of the
    learner's code that made it (the innermost location of Mosaic's own report in a
    chapter file) and Mosaic's reason; and that line, (where, code). None when the report
    has no operation to name (the raw message is then the diagnosis)."""
    op = re.search(r'error: "([\w.]+?):?"', text)
    reason = re.search(r"\)+:\s*([^\n]+?)\s*$", text, re.M)
    if op is None or reason is None:
        return None
    where = None
    for path, line in re.findall(r'"([^"]+\.py)":(\d+):\d+', text):
        found, code = _learner_line([(path, int(line), "")], root, chapter_files)
        if found:
            where = (found, code or _source_line((path, int(line))))
            break
    made = f" made at {where[0]}" if where else ""
    return (f"this runs in interpret mode but would not compile for a TPU: Mosaic, the TPU "
            f"compiler, cannot lower the `{op[1]}`{made}: {reason[1]}. The code on that line "
            "runs in plain JAX, but not everything it turns into lowers inside a TPU "
            "kernel: can it be written with the ops this chapter uses (an iota mask, "
            "jnp.where, a sum or a matmul)?"), where


# ------------------------------------------------- Mosaic GPU race reports ---
# GPU interpret mode reports a race as two accesses to one buffer: the current one,
# then the earlier one it is not ordered after, each with its warpgroup and (where the
# access is the learner's) file:line:column. The column names the call or subscript,
# so the kit reads which operation it was: a TMA copy in or out of SMEM, a wgmma, a
# plain load or store. Which pair it is says what is missing.

_GPU_ACCESS = re.compile(
    r"(read|write) of HostAllocationKey\([^)]*\)[^\n]*? from Warpgroup\(([^)]*)\),"
    r"[ \t]*(?:(\S+\.py):(\d+):(\d+) \(([\w.<>]+)\))?")

_GPU_OPS = {"copy_gmem_to_smem": "tma_in", "copy_smem_to_gmem": "tma_out", "wgmma": "mma",
            "load": "load", "store": "store"}

_GPU_RACE_SAYS = {
    "race_barrier_wait": (
        "this line reads SMEM that a TMA copy (the line under 'copy') may still be "
        "filling: plgpu.copy_gmem_to_smem only starts the copy and returns at once. Its "
        "data is there once plgpu.barrier_wait on the copy's barrier has returned, in the "
        "warpgroup that reads it: wait on that barrier before the first read (a wgmma "
        "reads too)."),
    "race_commit": (
        "an asynchronous unit (the TMA copy or wgmma under 'async') reads SMEM that your "
        "store (under 'store') wrote, with no plgpu.commit_smem() between them: the TMA "
        "engine and the tensor core do not see plain stores to SMEM until commit_smem "
        "makes them visible. Call plgpu.commit_smem() after the stores, before the copy "
        "or the wgmma."),
    "race_refill": (
        "a TMA copy (under 'copy') writes into SMEM that your code read earlier (under "
        "'read') with no plgpu.commit_smem() between the read and the copy: the TMA "
        "engine is not ordered after plain loads. Call plgpu.commit_smem() once you are "
        "done reading a buffer, before a copy refills it (in a plgpu.emit_pipeline body: "
        "at the end of the body, because the pipeline refills the slot you just read)."),
    "race_copy_overwrite": (
        "this TMA copy (under 'copy') writes SMEM that an earlier copy (under 'earlier') "
        "may still be filling, and nothing between them waited for the earlier one: the "
        "two land in any order. Wait for a buffer's copy (plgpu.barrier_wait on its "
        "barrier, or, when another warpgroup reads it, on a barrier that warpgroup "
        "arrives on once it is done) before copying into the buffer again."),
    "race_copy_threads": (
        "a TMA copy into SMEM issued by one warpgroup (under 'copy') and a read of that "
        "SMEM in another (under 'read') are not ordered. Either the reader does not wait "
        "for the copy (plgpu.barrier_wait on the barrier the copy signals, before the "
        "read), or the producer refills a slot the reader has not released yet (the "
        "reader arrives on a 'consumed' barrier after its last read of the slot, "
        "plgpu.barrier_arrive, and the producer waits on it, plgpu.barrier_wait, before "
        "copying into the slot again)."),
    "race_blocks": (
        "two blocks of the grid (under 'first' and 'then') touch the same part of an "
        "array, at least one of them writing: blocks run in parallel, in any order, and "
        "nothing orders one block after another. Each block must write only its own "
        "part: check the slice it computes from lax.axis_index (pl.ds(first, size) "
        "starts at `first` and takes `size`)."),
    "barrier_deadlock": (
        "your kernel would never finish: each warpgroup still running waits (under "
        "'waits') for a completion of a barrier that nothing left to run will bring. The "
        "kit ran your kernel's loops and barriers on their integers before running it. "
        "Each plgpu.barrier_wait takes the barrier's next completion, which a TMA copy "
        "signalling it or a plgpu.barrier_arrive of another warpgroup brings: count, "
        "barrier by barrier and step by step, the completions and the waits."),
    "race_wgmma_refill": (
        "end the pipeline body with plgpu.wgmma_wait(0): a TMA copy refills an SMEM slot "
        "that the wgmma under 'wgmma' may still be reading. plgpu.wgmma only issues the "
        "product; the tensor core reads its operands until a plgpu.wgmma_wait(n) leaves "
        "at most n wgmmas running, and plgpu.emit_pipeline refills the slot the body read "
        "as soon as the body returns (with delay_release=d on the BlockSpecs, the slot of "
        "d steps back: then plgpu.wgmma_wait(d) is enough). GPU interpret mode finishes "
        "every wgmma at once and cannot see this; a Hopper would multiply tiles half "
        "overwritten."),
    "race_threads": (
        "two warpgroups touch one SMEM buffer (under 'first' and 'then'), at least one of "
        "them writing, and nothing orders them: warpgroups run concurrently. The one that "
        "must go second waits on a barrier (plgpu.barrier_wait) that the first arrives on "
        "(plgpu.barrier_arrive) once its accesses are done."),
}


def _gpu_race(text: str, root: Path, chapter_files) -> Finding | None:
    """A GPU interpret-mode race report as a finding that says what is missing (a
    barrier wait, a commit_smem, a barrier between warpgroups), with the learner's lines;
    None when the report is not one (a TPU report) or not a pair the kit knows."""
    accesses = _GPU_ACCESS.findall(text)
    if len(accesses) < 2:
        return None
    (now_kind, now_wg, *now_at), (then_kind, then_wg, *then_at) = accesses[:2]
    now, then = _gpu_op(now_kind, now_at), _gpu_op(then_kind, then_at)
    same_thread = _warpgroup(now_wg) == _warpgroup(then_wg)
    copies_in = ("tma_in", "pipeline")
    plain = now in ("load", "store") and then in ("load", "store")
    if _block(now_wg) != _block(then_wg) or (same_thread and plain):
        # one warpgroup's plain loads and stores are ordered by its program: an unordered
        # pair on one thread's name comes from two blocks of the grid (interpret mode
        # runs the blocks of a grid under one name)
        kind, facts = "race_blocks", [("first", then_at), ("then", now_at)]
    elif not same_thread:   # threads run concurrently: which access came first says little
        copy, other = ((now_at, then_kind) if now in copies_in else
                       (then_at, now_kind) if then in copies_in else (None, None))
        if copy is not None and other == "read":
            read = then_at if copy is now_at else now_at
            kind, facts = "race_copy_threads", [("copy", copy), ("read", read)]
        else:
            kind, facts = "race_threads", [("first", then_at), ("then", now_at)]
    elif then in copies_in and now_kind == "read":
        kind, facts = "race_barrier_wait", [("reads", now_at), ("copy", then_at)]
    elif now in copies_in and then_kind == "read":
        kind, facts = "race_refill", [("copy", now_at), ("read", then_at)]
    elif now in copies_in and then in copies_in:
        kind, facts = "race_copy_overwrite", [("copy", now_at), ("earlier", then_at)]
    elif now in ("tma_out", "mma") and then == "store":
        kind, facts = "race_commit", [("async", now_at), ("store", then_at)]
    else:
        return None
    shown = [(label, _gpu_line(at, root, chapter_files)) for label, at in facts]
    where = next((line.split("   ")[0] for _, line in shown if ".py:" in line), "")
    return Finding(kind, _GPU_RACE_SAYS[kind], facts=shown, where=where)


def _warpgroup(text: str) -> str:
    found = re.search(r"warpgroup_id=(\d+)", text)
    return found[1] if found else text


def _block(text: str) -> str:
    found = re.findall(r"(?:cluster|block)_id=(\d+)", text)
    return ",".join(found) if found else text


def _gpu_op(kind: str, at) -> str:
    """What an access of a race report was: "tma_in", "tma_out", "mma", "load", "store",
    "pipeline" (a copy with no line of the learner's: made by emit_pipeline), "?"."""
    path, line, column, _ = at
    if not path:
        return "pipeline" if kind == "write" else "?"
    return _GPU_OPS.get(_operation_at(path, int(line), int(column)), "?")


def _operation_at(path: str, line: int, column: int) -> str:
    """The operation written at (line, column) of a file: a call's name
    ("copy_gmem_to_smem"), "load" or "store" for a subscript of a ref."""
    import ast

    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return ""
    found = ""
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) != line or getattr(node, "col_offset", None) != column:
            continue
        if isinstance(node, ast.Call):
            func = node.func
            return getattr(func, "attr", None) or getattr(func, "id", "") or ""
        if isinstance(node, ast.Subscript):
            found = "store" if isinstance(node.ctx, ast.Store) else "load"
    return found


def _gpu_line(at, root: Path, chapter_files) -> str:
    path, line, _, _ = at
    if not path:
        return "a copy that plgpu.emit_pipeline makes for one of its BlockSpecs"
    where, code = _learner_line([(path, int(line), "")], root, chapter_files)
    where = where or f"{Path(path).name}:{line}"
    return f"{where}   {(code or _source_line((path, int(line)))).strip()}"


def kit_error(error: BaseException, frames: list[tuple[str, int, str]]) -> Finding:
    """A failure of the kit's own machinery, said as such: what failed, where in the
    kit, and what to report."""
    from . import jaxcompat

    step = getattr(error, "step", None)
    cause = getattr(error, "error", error)
    where = next((f"{Path(f).parent.name}/{Path(f).name}:{line}" for f, line, _ in
                  reversed(frames) if Path(f).parent.name == "pytest_pallas_hints"
                  or Path(f).name.startswith("test_")), "")
    message = f"{type(cause).__name__}: {cause}"
    facts = [("raised", message if len(message) < 300 else message[:297] + "...")]
    if where:
        facts.append(("in", where + (f" ({step})" if step else "")))
    versions = f"JAX {jaxcompat.installed('jax')}, jaxlib {jaxcompat.installed('jaxlib')}"
    return Finding("kit_error", (
        f"this is a problem in the exercise kit, not in your code: "
        f"{step or 'a check'} failed on {versions}. Your answer was not judged. Please "
        "report it to the kit's maintainers with this message and the output of "
        "`pip show jax jaxlib pallas-exercises`; the other tests still count."), facts=facts)


def _without_bug_report(text: str) -> str:
    """JAX's "please file a bug" wrapper and MLIR dumps off a lowering error: what is
    left is the rule the kernel broke."""
    text = re.sub(r"Pallas encountered an internal verification error\. Please file a bug "
                  r"at \S+\.? ?(?:Error details: )?", "", text)
    return re.sub(r"\s*see current operation:.*", "", text, flags=re.S)


def _source_line(where: tuple[str, int]) -> str:
    try:
        return Path(where[0]).read_text(encoding="utf-8").splitlines()[where[1] - 1]
    except (OSError, IndexError):
        return ""


def _typo(error: NameError, where: str, code: str, root: Path) -> Finding | None:
    """A NameError for a name the learner's file binds nowhere (rules.typos): a typo,
    said as one, with the file's closest names and the line, the name marked."""
    from . import rules

    name = getattr(error, "name", None) or (re.findall(r"name '(\w+)'", str(error)) or [""])[0]
    if not (where and name):
        return None
    try:
        source = (root / where.rpartition(":")[0]).read_text(encoding="utf-8")
    except OSError:
        return None
    found = [typo for typo in rules.typos(source) if typo.name == name]
    if not found:
        return None   # bound somewhere (read before it is assigned): the error says so
    line = int(where.rpartition(":")[2])
    typo = next((t for t in found if t.line == line), found[0])
    return Finding("typo", typo_words(typo), facts=[("at", pointed(where, code or typo.code,
                                                                   name))], where=where)


def typo_words(typo) -> str:
    """What a typo finding says: the name is bound nowhere; the closest name, if any."""
    said = f"`{typo.name}` is defined nowhere in this file and is no builtin: a typo?"
    if not typo.matches:
        return said + " Correct its spelling, or define it before this line."
    return said + f" Did you mean `{typo.matches[0]}`?"


def pointed(where: str, code: str, name: str = "", column: int | None = None,
            width: int = 1) -> str:
    """'exercises/basics.py:3   def add_one(x:' with a caret line under ``name`` (its
    first whole-word use on the line) or under ``column`` (0-based, in ``code``)."""
    shown = code.strip()
    if name:
        found = re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", shown)
        column, width = (found.start(), len(name)) if found else (None, 0)
    else:
        column = None if column is None else column - (len(code) - len(code.lstrip()))
    head = f"{where}   {shown}"
    if column is None or not 0 <= column <= len(shown):
        return head
    return head + "\n" + " " * (len(where) + 3 + column) + "^" * max(1, width)


def _import_error_at(error, root: Path) -> list[tuple[str, str]]:
    """For a chapter file that does not import: its line with a caret under the error
    (a syntax error) or the name (a typo at the top level of the file)."""
    cause, path, line = (getattr(error, attribute, None) for attribute in ("error", "path", "line"))
    if path is None or not line:
        return []
    try:
        shown = Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        shown = Path(path).name
    where = f"{shown}:{line}"
    broken = getattr(error, "broken", None)
    if broken is not None:   # the rule: the line it names
        return [("at", pointed(where, broken.code))]
    if isinstance(cause, SyntaxError):
        code = (cause.text or _source_line((str(path), line))).rstrip("\n")
        offset = (cause.offset or 0) - 1
        end = cause.end_offset if cause.end_lineno == cause.lineno and cause.end_offset \
            else 0
        return [("at", pointed(where, code, column=offset if offset >= 0 else None,
                               width=max(1, end - 1 - offset)))]
    code = _source_line((str(path), line))
    if isinstance(cause, NameError):
        typo = _typo(cause, where, code, root)
        if typo is not None:
            return typo.facts + [("typo", typo.says)]
    return [("at", pointed(where, code))] if code else []


def _broadcast(first: str, second: str) -> str:
    """Two shapes that do not broadcast; when one is the other less a dim, a reduction
    lost it."""
    a, b = ([int(n) for n in re.findall(r"\d+", shape)] for shape in (first, second))
    short, long = sorted((a, b), key=len)
    dropped = [d for d in range(len(long)) if long[:d] + long[d + 1:] == short]
    if len(long) == len(short) + 1 and dropped:
        return (f"shapes {first} and {second} do not broadcast together. The smaller looks "
                f"like a reduction of the larger over dim {dropped[-1]} that dropped it: "
                "pass keepdims=True (jnp.max(x, axis=1, keepdims=True)) so that the result "
                "keeps a dim of size 1 and broadcasts against the rows it came from.")
    return (f"shapes {first} and {second} do not broadcast together: dims must be equal "
            "or 1, compared from the last. Which of the two has the shape you meant?")


def _out_of_bounds(block: str, name: str, step: str, rest: str = "") -> str:
    """Why an index map pointed outside its array, read from the numbers: the block it
    asked for, the grid step, and (where the message says) the window and array shape."""
    said = (f"at grid step {step}, the index map of {name} asks for block {block}, "
            "which lies outside the array. ")
    wanted = [int(n) for n in re.findall(r"-?\d+", block)]
    at = [int(n) for n in re.findall(r"-?\d+", step)]
    windows = re.findall(r"slice\((-?\d+), (-?\d+)", rest)
    sizes = [int(stop) - int(start) for start, stop in windows]
    starts = [int(start) for start, _ in windows]
    shape = re.search(r"has shape (\([^)]*\))", rest)
    if shape and len(starts) == len(wanted):
        element = _element_windows_past(name, step, wanted, starts, sizes, shape[1])
        if element:
            return element
    if len(at) >= 2 and wanted[:len(at)] == at[::-1]:
        return said + ("That is the grid step reversed: does the index map return (j, i) "
                       "where the grid runs over (i, j)?")
    if sizes and any(size > 1 and a > 0 and w == a * size
                     for w, size in zip(wanted, sizes) for a in at):
        return said + ("It is an element offset (grid index × block size): index maps "
                       "return block indices, which Pallas multiplies by the block shape.")
    where = ""
    if shape and sizes and len(sizes) == len(wanted):
        dims = [int(n) for n in re.findall(r"\d+", shape[1])]
        counts = [-(-d // b) if b else 0 for d, b in zip(dims, sizes)]
        past = [f"along dim {d} it has {c} block{'s' * (c != 1)} (0 to {c - 1})"
                for d, (w, c) in enumerate(zip(wanted, counts)) if w >= c or w < 0]
        where = (f"The array has shape {shape[1]}: " + "; ".join(past) + ". ") if past else ""
    return said + where + ("Index maps return block indices, from 0 to the number of "
                           "blocks - 1 along each dim. Either the index map asks for the "
                           "wrong block, or the array is smaller than the grid walks (for an "
                           "output: out_shape).")


def _element_windows_past(name: str, step: str, wanted: list[int], starts: list[int],
                          sizes: list[int], shape: str) -> str | None:
    """The words for an index map whose pl.Element dims put a window past the array, or
    None. A window starts at the index map's own number along an Element dim (an element
    offset), at that number times the block size along a blocked one: a dim of more than
    one element whose window starts at the number itself, not at 0, is an Element dim."""
    dims = [int(n) for n in re.findall(r"\d+", shape)]
    element = [d for d, (w, s, n) in enumerate(zip(wanted, starts, sizes))
               if w == s and w != 0 and n > 1]
    past = [d for d in element if starts[d] + sizes[d] > dims[d] or starts[d] < 0]
    if not past or len(dims) != len(wanted):
        return None
    ends = "; ".join(f"along dim {d} the window at offset {starts[d]} of {sizes[d]} elements "
                     f"ends at {starts[d] + sizes[d]}, past the array's end" for d in past)
    return (f"at grid step {step}, the index map of {name} returns the element offsets "
            f"{tuple(wanted)} (pl.Element dims: where the window starts, not a block index), "
            f"and the window there reaches past the array: {ends}. Either the offset is too "
            "far (a window starts at the element where its tile begins), or the array is "
            "shorter than the windows need: pad it so that the last window fits.")


def _revisited(output: str, step: str, before: str | None = None, kernels=()) -> str:
    """Why an output block came back after the steps had moved on to another one. The
    interpreter runs a "parallel" axis's steps shuffled (two TPU cores would split
    them): when the grid steps moved along such an axis, that axis is the one to mark
    "arbitrary". ``kernels``: (name, grid, semantics) of the program's kernels."""
    said = (f"output {output} goes back to a block it left earlier (at grid step {step}): "
            "its first result was already written back and would be overwritten. ")
    now = [int(n) for n in re.findall(r"-?\d+", step)]
    was = [int(n) for n in re.findall(r"-?\d+", before or "")]
    moved = [d for d in range(min(len(now), len(was))) if now[d] != was[d]]
    for name, grid, semantics in kernels:
        if len(grid) != len(now) or len(semantics) != len(grid):
            continue
        parallel = [d for d in moved if semantics[d] == "parallel" and grid[d] != 1]
        if parallel:
            axis = parallel[-1]
            return said + (
                f"Grid axis {axis} of {name}() is marked \"parallel\", so its steps may run "
                "in any order (a TPU with two cores splits them between the cores; interpret "
                "mode shuffles them), and the steps along it that write one output block (a "
                "sum over the axis, or consecutive steps that name the same block) no longer "
                f"come one after the other. Mark axis {axis} \"arbitrary\": an axis may be "
                "\"parallel\" only when each of its steps writes output blocks of its own.")
    return said + ("The steps that write one output block must be consecutive and in order: "
                   "put the axis along which the block stays put last in the grid, and mark "
                   "it \"arbitrary\" (the steps of a \"parallel\" axis may be split between "
                   "cores).")


def _real_error(text: str) -> str:
    """The error inside a runtime error that carries a Python traceback as its message
    (a kernel that failed in interpret mode): its last "Type: message" line."""
    if "Traceback (most recent call last)" not in text:
        return text
    found = re.findall(r"^\s*(\w+(?:Error|Exception)\b.*)$", text.split(
        "Traceback (most recent call last)", 1)[1], re.M)
    return found[-1].strip() if found else text


def _kernel_arg_names(text: str) -> str:
    """'args[1] in pallas_call k at f.py:9' -> 'y_ref in ...': the kernel's own names."""
    found = re.search(r"pallas_call (\w+) at (\S+\.py):(\d+)", text)
    if not found or "args[" not in text:
        return text
    try:
        import ast

        tree = ast.parse(Path(found[2]).read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return text
    kernel = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                   and n.name == found[1]), None)
    if kernel is None:
        return text
    names = [a.arg for a in kernel.args.args]
    return re.sub(r"\bargs\[(\d+)\]",
                  lambda m: names[int(m[1])] if int(m[1]) < len(names) else m[0], text)


def _readable(text: str) -> str:
    """JAX's block shapes as a learner writes them: (Blocked(block_size=8), ...) -> (8, ...)."""
    text = re.sub(r"Blocked\(block_size=(\d+)\)", r"\1", text or "")
    return re.sub(r"Squeezed\(\)", "None", text)


_QUIET = {"not_started"}                       # one line, no facts
_SELF_EXPLAINED = {"traced_if", "traced_index_map", "race", "hang", "broken_chapter",
                   "lowering", "lowering_tiling"}


def _line_at(text: str, position: int) -> str:
    """The whole line of ``text`` around ``position``, without JAX's wrapper prefixes."""
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    line = text[start:end if end >= 0 else None].strip()
    return re.sub(r"^(?:\w+Error: )?(?:INTERNAL: )?(?:CpuCallback error.*?: )?", "", line) or line


def _stub_raised(frames, root) -> bool:
    """Whether a NotImplementedError came from a stub: the innermost chapter-file line of
    the traceback is the raise that ends a function still ending so (``chapters.stubs``;
    the line's text where the file cannot be read). JAX's own kernels, pasted into an
    exercise file, raise it for what they do not support: a message to read, not an
    unfinished puzzle."""
    from . import chapters

    for filename, lineno, code in reversed(frames):
        if not _learner_line([(filename, lineno, code)], root, _CHAPTER_FILES)[0]:
            continue
        path = Path(filename)
        if not path.is_file():
            return "raise NotImplementedError" in (code or "")
        return lineno in chapters.stubs(path).values()
    return False


_CHAPTER_FILES = ("exercises", "reference", "mistakes")


def _learner_line(frames, root, chapter_files):
    for filename, lineno, code in reversed(frames):
        path = Path(filename)
        if path.parent.name in chapter_files or path.parent.parent.name in chapter_files:
            if path.name.startswith("test_"):
                continue
            try:
                shown = path.resolve().relative_to(root.resolve())
            except ValueError:
                shown = path
            return f"{shown.as_posix()}:{lineno}", code or ""
    return "", ""


# (regex over "Type: message", kind, sentence with {0}.. from the regex groups)
_ERRORS = [
    (r"^NotImplementedError(?! \(not a stub\))", "not_started", "not started"),
    (r"^ChapterRuleBroken", "broken_chapter",
     "this chapter's file breaks the rule for exercise files, so none of its puzzles "
     "run: change the line named above (the other chapters still run)."),
    (r"^ChapterImportError", "broken_chapter",
     "this chapter's file does not import, so none of its puzzles can run: fix the line "
     "named above (the other chapters still run)."),
    (r"^RaceDetected", "race",
     "two accesses to one buffer, at least one a write, are not ordered: a DMA's "
     "destination read (or its source overwritten) before .wait(), or a buffer reused "
     "while a copy into it is in flight."),
    (r"^(?=.*KernelTimeout)(?=.*(?:dma_wait|semaphore_wait))", "hang",
     "the kernel never finished: it waits on a DMA or semaphore that nothing starts or "
     "signals. Every .wait() needs a matching .start() on the same semaphore."),
    (r"Not all copy_smem_to_gmem .*?operations completed before kernel finished",
     "smem_to_gmem_not_waited",
     "the kernel ends while a TMA copy out of SMEM (plgpu.copy_smem_to_gmem) may still be "
     "running: wait for the copies out with plgpu.wait_smem_to_gmem(0) after the last one, "
     "before the kernel ends (the SMEM it reads is freed then)."),
    (r"KernelTimeout: no result after (\S+) s: a warpgroup waits on a barrier", "hang",
     "the kernel never finished within {0} s: a warpgroup waits on a barrier that nothing "
     "completes. Every plgpu.barrier_wait needs one completion per wait: a TMA copy that "
     "signals the barrier, or plgpu.barrier_arrive by another warpgroup (as many "
     "arrivals as the barrier's num_arrivals), and the two warpgroups must agree on how "
     "many times each barrier completes."),
    (r"KernelTimeout: no result after (\S+) s", "hang",
     "no result after {0} s: a loop that never ends, or a wait on a DMA or semaphore "
     "that nothing starts or signals."),
    (r"^(?:TracerBoolConversionError|ConcretizationTypeError|TracerIntegerConversionError)"
     r".*for pallas_call index_map", "traced_index_map",
     "an index map gets its grid indices as traced values: Python's min, max, `if`, "
     "`and`/`or` cannot look at them. Use jnp.minimum, jnp.maximum or jnp.where."),
    (r"^(?:TracerBoolConversionError|ConcretizationTypeError|TracerIntegerConversionError)",
     "traced_if",
     "Python `if`, `bool()`, `and`/`or` or `int()` on a traced value: inside a kernel, "
     "values are only known when it runs. Use pl.when(cond) for code that runs "
     "conditionally, jnp.where(cond, a, b) for values, lax.cond for branches."),
    (r"Index map function .*? must return (\d+) values .*?Currently returning (\d+) values",
     "index_map_arity",
     "an index map must return {0} block indices, one per dim of its block, but "
     "returns {1}: return a tuple with an index for every dim (even when it is 0)."),
    (r"carry input and carry output must have equal types.*?component (\S+) has type "
     r"(\S+\]) but the corresponding output carry component has type (\S+\])",
     "carry_type",
     "a loop body (lax.fori_loop, @pl.loop) must return its carry with the shape and dtype "
     "it got: {0} came in as {1} and went out as {2}. A sum over the wrong axis, a missing "
     "keepdims=True, or a dtype changed on the way?"),
    (r"carry input and carry output must have equal types", "carry_type",
     "a loop body (lax.fori_loop, @pl.loop) must return its carry with the shape and dtype "
     "it got. A sum over the wrong axis, a missing keepdims=True, or a dtype changed on the "
     "way?"),
    (r"Cannot signal on a non-\(\)-shaped semaphore: (\([^)]*\))", "not_a_semaphore",
     "a copy was given a ref of shape {0} where its semaphore goes: the kernel gets its "
     "scratch refs in the order of scratch_shapes. Are the kernel's parameters in that "
     "order, and is the semaphore the third argument of pltpu.make_async_copy?"),
    (r"dma_wait requires a DMA semaphore, but got a regular semaphore", "regular_semaphore",
     "a copy signals and waits on a DMA semaphore: give it pltpu.SemaphoreType.DMA in "
     "scratch_shapes, not SemaphoreType.REGULAR (which only pl.semaphore_signal and "
     "pl.semaphore_wait use)."),
    (r"Index map function .*? must return integer scalars", "index_map_arity",
     "an index map must return integer block indices (use // not /)."),
    (r"Invalid shape for `swap`\. Ref shape: (\([^)]*\))\..*?Value shape: (\([^)]*\))",
     "store_shape",
     "you stored a value of shape {1} into a ref of shape {0}: a store must match the "
     "ref's shape. Compare the two: a reduction without keepdims=True, a block with a "
     "dim of size 1 that its BlockSpec should squeeze (None), a scratch or out_shape of "
     "another shape, this output's BlockSpec block shape (out_specs), or a slice of the "
     "wrong size?"),
    (r"lax\.(shift_\w+) requires arguments to have the same dtypes, got (\w+), (\w+)",
     "shift_dtypes",
     "lax.{0} takes two operands of one dtype, and got {1} and {2} (a Python int count "
     "such as 4 is an int32): cast the value to the count's dtype first, "
     "v.astype(jnp.{2}), or give the count the value's dtype."),
    (r"Invalid dtype for `swap`\. Ref dtype: (\w+)\. Value dtype: (\w+)", "store_dtype",
     "you stored a {1} value into a {0} ref (the line above). Which ref is it? An "
     "output: compute in {1} and cast once, as you store, value.astype(o_ref.dtype). A "
     "scratch that carries a sum or a state from step to step: declare it {1} (a {0} "
     "scratch rounds every update), and cast only the final store."),
    (r"Out-of-bounds block index (\([^)]*\)) for (?:input|output) \"(\w+)\" in iteration "
     r"(\([^)]*\))(.*)", "out_of_bounds", _out_of_bounds),
    (r"The kernel function in the pallas_call (\w+) .*?should return None", "kernel_returns",
     "a kernel returns nothing: {0} must store its result into an output ref, "
     "o_ref[...] = value, instead of returning it."),
    (r"Dimensions with parallel semantics must form a prefix of the grid", "parallel_prefix",
     "grid axes marked \"parallel\" must come before the others: put the reduction axis "
     "last in the grid, with dimension_semantics such as (\"parallel\", \"arbitrary\")."),
    (r"Revisited block .*? of output (\d+) in iteration (\([^)]*\))(?:\. The block was "
     r"previously visited in iterations (\([^)]*\)))?", "revisited", _revisited),
    (r"Out-of-bounds read of .*?: reading \[(.*?)\] but buffer has shape (\([^)]*\))",
     "out_of_bounds_ref",
     "a read past the end of a buffer inside the kernel: it reads at {0} in a ref of "
     "shape {1} (an index equal to a dim's size is one past its end). An index computed "
     "one step too far, a loop bound that runs one step too far, or a table with fewer "
     "rows than the grid reads "
     "(one per head, say)? A scalar read whose index may be out of range belongs "
     "inside the pl.when that needs it."),
    (r"Out of bound slice: start=(-?\d+), size=(\d+), stride=(\d+), dim=(\d+)",
     "out_of_bounds_ref",
     "a slice of a ref reaches past its end: it starts at {0} and takes {1} elements "
     "{2} apart, so its last is at {0} + ({1} - 1) * {2}, on a dim of {3}. A block or "
     "window one element too small, or an offset one step too far?"),
    (r"`indices` must not be longer than `shape`: indices=(\([^)]*\)), shape=(\([^)]*\))",
     "ref_rank",
     "a ref of shape {1} is indexed with {0}, more indices than it has dims. Is it declared "
     "with the shape you index: one semaphore per slot is pltpu.SemaphoreType.DMA((2,)), "
     "a buffer per slot a VMEM scratch with a leading slot dim?"),
    (r"Out of bound slice: start=(\d+), dim=(\d+)", "slice_out_of_bounds",
     "a slice starts at {0} in a dim of size {1}, past its end: the last valid start is the "
     "dim's size minus the slice's. Is the index one step too far (i + 1 where i is meant, "
     "or a loop bound one too many)?"),
    (r"Incompatible shapes for broadcasting: shapes=\[(\([^)]*\)), (\([^)]*\))\]",
     "broadcast", _broadcast),
    (r"Custom VJP bwd rule must produce .*?but got bwd output structure (.*?) for primal "
     r"input structure (.*?)\.?$", "vjp_structure",
     "your backward rule (the bwd of jax.custom_vjp) must return a tuple with one "
     "gradient per argument of the primal function, in their order: (dx,) for a function "
     "of one argument, None for an argument that has no gradient (integer labels, say). "
     "Yours returned {0} for arguments {1}."),
    (r"Linearization failed to produce known values", "no_vjp",
     "JAX cannot differentiate a pallas_call by itself: wrap the function that calls it "
     "in jax.custom_vjp, with a forward that returns the output and what the backward "
     "needs, and a backward (a kernel of its own) that returns one gradient per input."),
    (r"(\S+)\(\) takes (\d+) positional arguments? but (\d+) (?:were|was) given",
     "arity",
     "{0}() takes {1} arguments but was called with {2}. If it is an index map: Pallas "
     "calls it with one argument per grid axis and then, under a PrefetchScalarGridSpec, "
     "one per scalar-prefetch operand (its ref, in SMEM), in the order they were passed."),
    (r"(?:IndexError|out of bounds|Out-of-bounds)", "out_of_bounds_ref",
     "a read past the end of a buffer: check the slice bounds and loop bounds against "
     "the ref's shape."),
    (r"^LoweringFailed.*divisible by 8 and 128.*?for (\S+) in pallas_call.*?block shape "
     r"(\(.*?\)), array shape (\(.*?\))", "lowering_tiling",
     "this would not compile for a TPU: the last two dims of a block must be multiples "
     "of (8, 128), or equal the array's dims. {0} has block {1} on an array of shape "
     "{2}."),
    (r"^LoweringFailed.*Expected matmul acc to be 32-bit", "lowering_matmul_acc",
     "this would not compile for a TPU: its MXU adds up a matmul in 32 bits, so a dot "
     "of bf16 blocks must return float32 (jnp.dot(..., preferred_element_type="
     "jnp.float32)); cast where you store, not in the dot."),
    (r"^LoweringFailed.*Unimplemented primitive in Pallas TPU lowering(?: for [\w.]+)?: (\w+)",
     "lowering_primitive",
     "this runs in interpret mode but would not compile for a TPU: `{0}` has no lowering "
     "inside a TPU kernel. A cumulative sum becomes a masked sum over a triangle (an iota "
     "mask and a matmul or a sum); indexing a value at a traced position becomes a "
     "select with an iota mask; a dynamic slice of a value becomes a slice of a ref."),
    (r"^LoweringFailed: does not lower for TPU: (.*)", "lowering",
     "this runs in interpret mode but would not compile for a TPU: {0}"),
]


# --------------------------------------------------------------- render ---

# A finding that is a case of a broader one: a puzzle's words for the broader kind
# (written for what goes wrong there) serve when it has none for the narrow one. A
# never_stored finding the walk proved (detail "no_store") is not a case of NaN values
# stored: words for "nan" (scratch not initialised, a tail not masked) would point away
# from the store that never ran, so it takes only its own.
_BROADER = {"never_stored": "nan", "unwritten": "nan"}


def render(findings: list[Finding], words: dict[str, str] | None = None,
           output: str | None = None) -> list[str]:
    """Fact rows, then one ``diagnosis`` sentence for the most specific finding (the
    first): the puzzle's own words for its kind if it has them ("kind:output:detail",
    e.g. "nan:dscale:tail", then "kind:output", e.g. "blocks:dq", or "kind:detail", e.g.
    "outside:rev", before "kind"; then the same for the broader kind, "nan" for
    "never_stored"), else the engine's. A detail is what the kit has shown (the NaNs sit
    in a block that hangs off the array: "tail"), so words keyed by it may name a cause
    that words keyed by the symptom alone may only ask about."""
    if not findings:
        return []
    rows = [row for f in findings for row in f.facts]
    first, words = findings[0], words or {}
    broader = first.kind in _BROADER and first.detail != "no_store"
    kinds = [first.kind] + ([_BROADER[first.kind]] if broader else [])
    keys = [k for kind in kinds for k in (f"{kind}:{output}:{first.detail}", f"{kind}:{output}",
                                          f"{kind}:{first.detail}", kind)]
    chosen = next((words[k] for k in keys if k in words), first.says)
    if first.alike:   # several known mistakes give this very output: each is possible
        said = [chosen] + [words.get(f"{k}:{output}", words.get(k, k.replace("_", " ")))
                           for k in first.alike]
        chosen = "\n".join([f"your {output or 'output'} is exactly what {len(said)} known "
                             "mistakes give on this input, which cannot tell them apart; "
                             "one of these:"] + [f"({n}) {s}" for n, s in enumerate(said, 1)])
    lines = []
    for label, text in rows + [("diagnosis", chosen)]:
        lines += row(label, text)
    return lines


_UNWRAPPED = {"blocks", "at", "race", "waits", "started", "in flight", "waited", "also on it",
              "reads", "copy", "async", "store", "read", "first", "then",
              "earlier", "wgmma", "wait", "arrives"}   # file:line   code


def row(label: str, text: str) -> list[str]:
    """One labelled row, as a diagnosis shows it: the label in its column, the text
    wrapped beside it (a source line or a table kept whole)."""
    pad = " " * LABEL_WIDTH
    out = []
    for n, para in enumerate(text.split("\n")):
        wrapped = [para] if label in _UNWRAPPED and _laid_out(para) \
            else _wrap(para, WRAP - LABEL_WIDTH)
        for m, piece in enumerate(wrapped):
            head = label.ljust(LABEL_WIDTH) if n == 0 and m == 0 else pad
            out.append(head + piece)
    return out


def _laid_out(text: str) -> bool:
    """A row kept on one line: a source location with its code, or text aligned in
    columns (not a sentence, which wraps like any other)."""
    return bool(re.match(r"\S+\.py:\d+", text)) or "  " in text.strip() \
        or set(text.strip()) == {"^"}   # a caret under the line above


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]


def _shape(a: np.ndarray) -> str:
    return f"{tuple(a.shape)} {a.dtype}"


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)
