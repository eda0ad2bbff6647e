"""Pictures of a grid's walk over the blocks (``--show``).

For a kernel of a measured run: at every grid step, which block of each operand
its index map picks, whether that block is a new fetch (its index changed since
the step before, so the pipeline copies it) or the block already in VMEM, which
output block the step writes, and which steps do no MXU work (a skipping kernel's
left-out steps). Computed from the traced index maps and the scalar-prefetch
values of the run, the same source as the byte accounting, so a picture never
disagrees with a verdict.

Drawn two ways: in the terminal, one character a block (the order in which the
walk first reached it, ``*`` when it was copied more than once; ``·`` never), and
as an HTML file with an SVG per operand that a browser opens.
"""
from __future__ import annotations

import dataclasses
import html as escape

from .frozen import np

from . import walk

SYMBOLS = "123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
MOST = 24     # blocks drawn per row or column of a panel; more are summarised
PANELS = 4    # leading-dimension panels drawn per operand


@dataclasses.dataclass(frozen=True)
class OperandWalk:
    name: str
    is_input: bool
    indices: tuple            # per grid step, the block index (a tuple per step)
    fetched: tuple            # per grid step: a new block copied (inputs) / written (outputs)
    extent: tuple = ()        # the array's blocks per dim (0: not known), to draw the
    #                           blocks no step reached

    def blocks(self) -> dict[tuple, list[int]]:
        """Block index -> the steps that copied it (in) or wrote it back (out)."""
        found: dict[tuple, list[int]] = {}
        for step, (index, moved) in enumerate(zip(self.indices, self.fetched)):
            found.setdefault(tuple(index), [])
            if moved:
                found[tuple(index)].append(step)
        return found


@dataclasses.dataclass(frozen=True)
class GridWalk:
    kernel: str
    grid: tuple
    operands: tuple           # OperandWalk per BlockSpec'd operand
    work: tuple               # per grid step, the dot flops (empty when not counted)

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "grid": list(self.grid), "work": list(self.work),
                "operands": [[o.name, o.is_input, [list(i) for i in o.indices],
                              list(o.fetched), list(o.extent)] for o in self.operands]}

    @classmethod
    def from_dict(cls, data: dict) -> "GridWalk":
        return cls(data["kernel"], tuple(data["grid"]), tuple(
            OperandWalk(name, is_input, tuple(tuple(i) for i in indices), tuple(fetched),
                        tuple(rest[0]) if rest else ())
            for name, is_input, indices, fetched, *rest in data["operands"]),
            tuple(data["work"]))


def of(measured) -> list[GridWalk]:
    """The walk of every kernel run of a measured program."""
    walks = []
    for run, counts in zip(measured.executed, measured.counts):
        call = run.site.call
        steps = walk.grid_steps(call.grid)
        operands = []
        for block in call.blocks:
            if block.space in ("any", "semaphore", "semaphore_mem"):
                continue
            indices = walk.index_maps(block, steps, run.prefetch)
            moved = (indices != np.roll(indices, 1, axis=0)).any(axis=1)
            if block.is_input:
                moved[0] = True
            else:   # written back when the index is about to change, and at the end
                moved = np.roll(moved, -1)
                moved[-1] = True
            operands.append(OperandWalk(block.name, block.is_input,
                                        tuple(tuple(int(v) for v in i) for i in indices),
                                        tuple(bool(m) for m in moved), _extent(block)))
        walks.append(GridWalk(call.name, tuple(call.grid), tuple(operands),
                              tuple(counts.step_flops)))
    return walks


def _extent(block) -> tuple:
    """Blocks per dim of the operand's array (0 where its index is an element offset)."""
    return tuple(0 if d in block.element_dims else
                 -(-size // (b or 1)) for d, (size, b) in
                 enumerate(zip(block.array_shape, block.block_shape)))


# ------------------------------------------------------------- the terminal ---

def terminal(gw: GridWalk) -> list[str]:
    """Per operand, its blocks with the order the walk first reached them; the steps."""
    lines = [f"{gw.kernel}(): grid {gw.grid}, {len(gw.operands[0].indices) if gw.operands else 0}"
             " steps"]
    if gw.work and any(gw.work):
        skipped = [n for n, flops in enumerate(gw.work) if not flops]
        strip = "".join("·" if not flops else "█" for flops in gw.work[:96])
        lines.append(f"  steps     {strip}{' ...' if len(gw.work) > 96 else ''}")
        lines.append(f"            █ does MXU work · skips it ({len(skipped)} of "
                     f"{len(gw.work)} steps)")
    for operand in gw.operands:
        lines += _operand_lines(operand)
    return lines


def _operand_lines(operand: OperandWalk) -> list[str]:
    blocks = operand.blocks()
    order = {index: n for n, index in enumerate(
        sorted((i for i, steps in blocks.items() if steps), key=lambda i: blocks[i][0]))}
    moves = sum(len(s) for s in blocks.values())
    verb = "fetched" if operand.is_input else "written"
    again = sum(1 for s in blocks.values() if len(s) > 1)
    total = int(np.prod(operand.extent)) if operand.extent and all(operand.extent) else 0
    of = f" of {total}" if total > len(order) else ""
    lines = [f"  {operand.name} ({'in' if operand.is_input else 'out'}): {len(order)}{of} "
             f"blocks {verb}" + (" (· never)" if of else "") + f", {moves} copies"
             + (f", {again} blocks {verb} more than once (marked *)" if again else "")]
    for panel, grid in list(_panels(blocks, operand.extent))[:PANELS]:
        if panel:
            lines.append(f"    at {panel}")
        rows, cols = grid.shape
        for r in range(min(rows, MOST)):
            cells = []
            for c in range(min(cols, MOST)):
                index = grid[r, c]
                if index is None or index not in order:
                    cells.append("· ")
                else:
                    symbol = SYMBOLS[order[index] % len(SYMBOLS)]
                    cells.append(symbol + ("*" if len(blocks[index]) > 1 else " "))
            lines.append("    " + "".join(cells).rstrip() + (" ..." if cols > MOST else ""))
        if rows > MOST:
            lines.append("    ...")
    return lines


def _panels(blocks: dict, extent: tuple = ()):
    """(leading index, an object array [rows, cols] of block indices) per panel: the last
    two dims of the block index drawn, the ones before them one panel each; ``extent``
    (where known) draws the array's every block, the ones no step reached too."""
    if not blocks:
        return
    rank = len(next(iter(blocks)))
    lead = sorted({i[:-2] for i in blocks}) if rank > 2 else [()]
    for head in lead:
        mine = [i for i in blocks if i[:max(rank - 2, 0)] == head] if rank > 2 else list(blocks)
        tail = [i[-2:] if rank >= 2 else (0, i[-1]) for i in mine]
        known = tuple(extent[-2:]) if len(extent) >= 2 else (1,) + tuple(extent)
        rows = max(max(t[0] for t in tail) + 1, known[0] if len(known) == 2 else 0)
        cols = max(max(t[1] for t in tail) + 1, known[-1] if known else 0)
        grid = np.empty((rows, cols), dtype=object)
        for index, (r, c) in zip(mine, tail):
            if r >= 0 and c >= 0:
                grid[r, c] = index
        yield (head, grid.T if cols == 1 else grid)   # a column of blocks reads as a row


# ------------------------------------------------------------------ the file ---

def html(title: str, walks: list[GridWalk], wrong: list[list[bool]] | None = None,
         verdict: str = "") -> str:
    """A page with an SVG per operand of every walk; ``wrong``: a failing puzzle's map of
    wrong output blocks, and ``verdict`` its diagnosis (the block map as the terminal
    shows it), drawn beside."""
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>"
             f"{escape.escape(title)}</title><style>body{{font-family:sans-serif}}"
             "svg{margin:4px 12px 12px 0}</style></head><body>",
             f"<h1>{escape.escape(title)}</h1>"]
    for gw in walks:
        parts.append(f"<h2>{escape.escape(gw.kernel)}() · grid {escape.escape(str(gw.grid))}</h2>")
        if gw.work and any(gw.work):
            parts.append("<p>steps (grey: no MXU work):</p>" + _steps_svg(gw.work))
        for operand in gw.operands:
            parts.append(f"<h3>{escape.escape(operand.name)} "
                         f"({'input' if operand.is_input else 'output'})</h3>")
            parts += [_blocks_svg(operand, head, grid) for head, grid in
                      list(_panels(operand.blocks(), operand.extent))[:PANELS]]
    if wrong is not None:
        parts.append("<h2>wrong output blocks</h2>" + _wrong_svg(wrong))
    if verdict:
        parts.append(f"<h2>the verdict</h2><pre>{escape.escape(verdict)}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _blocks_svg(operand: OperandWalk, head, grid) -> str:
    blocks = operand.blocks()
    first = sorted((i for i, s in blocks.items() if s), key=lambda i: blocks[i][0])
    order = {index: n for n, index in enumerate(first)}
    rows, cols = min(grid.shape[0], MOST), min(grid.shape[1], MOST)
    size = 28
    cells = []
    for r in range(rows):
        for c in range(cols):
            index = grid[r, c]
            steps = blocks.get(index, []) if index is not None else []
            shade = _shade(order[index] / max(len(order) - 1, 1)) if steps else "#eeeeee"
            label = str(order[index] + 1) if steps else ""
            tip = (f"block {index}: {'fetched' if operand.is_input else 'written'} at steps "
                   f"{steps}" if steps else f"block {index if index is not None else (r, c)}: never")
            cells.append(f"<g><title>{escape.escape(tip)}</title><rect x='{c * size}' "
                         f"y='{r * size}' width='{size - 2}' height='{size - 2}' "
                         f"fill='{shade}'/><text x='{c * size + size / 2 - 1}' "
                         f"y='{r * size + size / 2 + 3}' font-size='10' text-anchor='middle'>"
                         f"{label}{'*' if len(steps) > 1 else ''}</text></g>")
    caption = f"<text x='0' y='{rows * size + 12}' font-size='11'>{escape.escape(str(head))}</text>" \
        if head else ""
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{cols * size}' "
            f"height='{rows * size + 16}'>{''.join(cells)}{caption}</svg>")


def _steps_svg(work) -> str:
    shown = list(work)[:200]
    bars = "".join(f"<rect x='{n * 6}' y='0' width='5' height='14' "
                   f"fill='{'#3b7dd8' if flops else '#cccccc'}'><title>step {n}: {flops} flops"
                   "</title></rect>" for n, flops in enumerate(shown))
    return f"<svg xmlns='http://www.w3.org/2000/svg' width='{len(shown) * 6}' height='16'>{bars}</svg>"


def _wrong_svg(wrong) -> str:
    rows = len(wrong)
    cols = max((len(r) for r in wrong), default=0)
    cells = "".join(f"<rect x='{c * 18}' y='{r * 18}' width='16' height='16' "
                    f"fill='{'#d84b3b' if bad else '#5bb85b'}'/>"
                    for r, row in enumerate(wrong) for c, bad in enumerate(row))
    return f"<svg xmlns='http://www.w3.org/2000/svg' width='{cols * 18}' height='{rows * 18}'>{cells}</svg>"


def _shade(t: float) -> str:
    """Early visits dark blue, late ones light yellow."""
    start, end = (38, 70, 140), (250, 225, 110)
    r, g, b = (round(a + (z - a) * t) for a, z in zip(start, end))
    return f"#{r:02x}{g:02x}{b:02x}"
