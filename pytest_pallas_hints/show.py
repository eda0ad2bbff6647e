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
    block_shape: tuple = ()   # the BlockSpec's block (None: a squeezed dim)
    array_shape: tuple = ()
    dtype: str = ""
    wrong: tuple = ()         # output blocks a failing check found wrong (block indices)

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
    config: str = ""          # the test configuration it walked
    failed: str = ""          # a failing run: what failed ("" for a run that passed)

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "grid": list(self.grid), "work": list(self.work),
                "config": self.config, "failed": self.failed,
                "operands": [[o.name, o.is_input, [list(i) for i in o.indices],
                              list(o.fetched), list(o.extent), list(o.block_shape),
                              list(o.array_shape), o.dtype, [list(w) for w in o.wrong]]
                             for o in self.operands]}

    @classmethod
    def from_dict(cls, data: dict) -> "GridWalk":
        def operand(name, is_input, indices, fetched, extent=(), block=(), array=(),
                    dtype="", wrong=()):
            return OperandWalk(name, is_input, tuple(tuple(i) for i in indices),
                               tuple(fetched), tuple(extent), tuple(block), tuple(array),
                               dtype, tuple(tuple(w) for w in wrong))
        return cls(data["kernel"], tuple(data["grid"]),
                   tuple(operand(*o) for o in data["operands"]), tuple(data["work"]),
                   data.get("config", ""), data.get("failed", ""))

    def with_wrong(self, shape: tuple, boxes: list) -> "GridWalk":
        """The walk with the output blocks holding ``boxes`` (element (start, stop) per
        dim of an output of ``shape``, wrong per a failing check) marked wrong."""
        operands = []
        for o in self.operands:
            if o.is_input or tuple(o.array_shape) != tuple(shape) or not o.block_shape:
                operands.append(o)
                continue
            sizes = [1 if b is None else b for b in o.block_shape]
            wrong = set()
            for box in boxes:
                ranges = [range(start // size, -(-stop // size))
                          for (start, stop), size in zip(box, sizes)]
                wrong |= {tuple(r[i] for r, i in zip(ranges, ix))
                          for ix in np.ndindex(*[len(r) for r in ranges])}
            operands.append(dataclasses.replace(o, wrong=tuple(sorted(wrong))))
        return dataclasses.replace(self, operands=tuple(operands))


def of(measured, config: str = "", failed: str = "") -> list[GridWalk]:
    """The walk of every kernel run of a measured program."""
    walks = []
    for run, counts in zip(measured.executed, measured.counts):
        walks.append(_walk(run.site.call, run.prefetch, tuple(counts.step_flops), config,
                           failed))
    return walks


def planned(traced, args, config: str = "", failed: str = "") -> list[GridWalk]:
    """The walk the index maps plan for every kernel of a traced program that did not
    run (a failing run): scalar-prefetch values where they follow from the arguments,
    the work of each step where the kernel can be walked."""
    import jax

    prefetched = walk.prefetch_before_run(traced.closed, jax.tree_util.tree_leaves(args)) or {}
    by_index = {index: eqn_id for eqn_id, index in traced._by_eqn.items()}
    walks = []
    for site in traced.sites:
        call = site.call
        if call.backend != "mosaic_tpu" or None in call.grid or \
                int(np.prod(call.grid or (1,))) > 4096:
            continue
        prefetch = prefetched.get(by_index.get(site.index)) if call.num_prefetch else []
        if prefetch is None:
            continue
        try:
            work = tuple(walk.kernel_counts(call, prefetch).step_flops)
        except Exception:   # a kernel the walk cannot follow: the blocks alone
            work = ()
        try:
            walks.append(_walk(call, prefetch, work, config, failed))
        except Exception:   # an index map the walk cannot evaluate
            continue
    return walks


def _walk(call, prefetch, work, config, failed) -> GridWalk:
    steps = walk.grid_steps(call.grid)
    operands = []
    for block in call.blocks:
        if block.space in ("any", "semaphore", "semaphore_mem"):
            continue
        indices = walk.index_maps(block, steps, prefetch)
        moved = (indices != np.roll(indices, 1, axis=0)).any(axis=1)
        if block.is_input:
            moved[0] = True
        else:   # written back when the index is about to change, and at the end
            moved = np.roll(moved, -1)
            moved[-1] = True
        operands.append(OperandWalk(block.name, block.is_input,
                                    tuple(tuple(int(v) for v in i) for i in indices),
                                    tuple(bool(m) for m in moved), _extent(block),
                                    tuple(block.block_shape), tuple(block.array_shape),
                                    str(np.dtype(block.dtype))))
    return GridWalk(call.name, tuple(call.grid), tuple(operands), tuple(work), config,
                    failed)


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
    return lines + step_table(gw)


TABLE_MOST = 32   # grid steps up to which the terminal prints a step table


def step_table(gw: GridWalk) -> list[str]:
    """Per grid step of a small grid: its program ids, its MXU work, and each operand's
    block (``*`` when copied in, or written back, at that step)."""
    steps = _steps_of(gw)
    if not steps or len(steps) > TABLE_MOST or not gw.operands:
        return []
    names = [o.name for o in gw.operands]
    ids = [",".join(map(str, p)) for p in steps]
    cells = [[",".join(map(str, o.indices[s])) + ("*" if o.fetched[s] else " ")
              for o in gw.operands] for s in range(len(steps))]
    widths = [max(len(n), *(len(row[k]) for row in cells)) for k, n in enumerate(names)]
    id_width = max(len("ids"), *(len(i) for i in ids))
    work = bool(gw.work)
    head = f"  {'step':>4}  {'ids':<{id_width}}" + (f"  {'MXU flops':>10}" if work else "") + \
        "".join(f"  {n:<{w}}" for n, w in zip(names, widths))
    lines = [head]
    for s in range(len(steps)):
        lines.append(f"  {s:>4}  {ids[s]:<{id_width}}"
                     + (f"  {gw.work[s]:>10,}" if work else "")
                     + "".join(f"  {c:<{w}}" for c, w in zip(cells[s], widths)))
    lines.append("  (blocks by index; * copied in, or written back, at that step)")
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


# ------------------------------------------------------------------ the page ---

# Colours: work per step from light to dark blue; labels in whichever of near-black and
# white contrasts more with the cell (WCAG's contrast ratio, checked by the tests).
LIGHT, DARK = (219, 231, 247), (23, 62, 120)
NEVER, SKIPPED, PADDING = "#eeeeee", "#f6c6c0", "#f4f4f4"
NOW, FETCH, WRONG, AGAIN = "#000000", "#d4500b", "#c8102e", "#7b3294"
INK, PAPER = "#1a1a1a", "#ffffff"
CELL = 26                     # pixels a cell
MOST_CELLS = 48               # cells per row or column drawn; more are summarised
MOST_PANELS = 8               # leading-index panels drawn per operand


def html(title: str, walks: list[GridWalk], wrong: list[list[bool]] | None = None,
         verdict: str = "") -> str:
    """A page that works offline: per walk, the grid drawn over two of its axes (work per
    step coloured), a step control (a slider; the arrow keys) and every operand's block
    grid in its true orientation, the block of the current step outlined; re-fetches,
    never-reached blocks, padding steps and wrong output blocks marked; a legend.
    ``verdict``: a failing run's diagnosis, shown as the terminal shows it."""
    import json

    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
             f"<title>{escape.escape(title)}</title><style>{_STYLE}</style></head><body>",
             f"<h1>{escape.escape(title)}</h1>", _legend()]
    data = []
    for n, gw in enumerate(walks):
        parts.append(_section(n, gw))
        data.append({"steps": _steps_of(gw), "work": list(gw.work),
                     "operands": [{"indices": [list(i) for i in o.indices],
                                   "fetched": [bool(f) for f in o.fetched]}
                                  for o in gw.operands]})
    if wrong is not None:
        parts.append("<h2>wrong output blocks</h2>" + _wrong_svg(wrong))
    if verdict:
        parts.append(f"<h2>the verdict</h2><pre class='verdict'>{escape.escape(verdict)}</pre>")
    parts.append(f"<script>const WALKS = {json.dumps(data)};\n{_SCRIPT}</script></body></html>")
    return "\n".join(parts)


_STYLE = """body{font-family:system-ui,sans-serif;color:#1a1a1a;background:#fff;margin:16px}
section.walk{border-top:2px solid #555;margin-top:18px;padding-top:6px}
.control{position:sticky;top:0;background:#fff;padding:6px 0;z-index:2}
.control input{width:min(640px,70vw);vertical-align:middle}
.stepinfo{font-family:monospace;white-space:pre;display:block;margin-top:4px}
figure{display:inline-block;margin:6px 18px 10px 0;vertical-align:top}
figcaption{font-size:13px;max-width:560px}
.failed{color:#c8102e;font-weight:bold}
.legend svg{vertical-align:middle;margin-right:4px}.legend span{margin-right:14px;font-size:13px}
rect.now{stroke:#000;stroke-width:3}rect.fetch{stroke:#d4500b;stroke-width:3;stroke-dasharray:4 2}
pre.verdict{background:#f4f4f4;padding:8px}"""

_SCRIPT = r"""
function show(n, step) {
  const walk = WALKS[n], sec = document.getElementById('walk' + n);
  step = Math.max(0, Math.min(walk.steps.length - 1, step));
  sec.querySelector('input').value = step;
  sec.querySelectorAll('rect.now, rect.fetch').forEach(r => r.classList.remove('now', 'fetch'));
  const point = walk.steps[step];
  const cell = sec.querySelector(`.gridmap rect[data-point="${point.slice(-2).join(',')}"]`);
  if (cell) cell.classList.add('now');
  const lines = [`step ${step} of ${walk.steps.length}: program ids (${point.join(', ')})` +
                 (walk.work.length ? ` · ${walk.work[step].toLocaleString()} MXU flops` : '')];
  walk.operands.forEach((op, k) => {
    const index = op.indices[step], fetched = op.fetched[step];
    const key = index.join(',');
    const r = sec.querySelector(`.operand[data-operand="${k}"] rect[data-block="${key}"]`);
    if (r) r.classList.add(fetched ? 'fetch' : 'now');
    const fig = sec.querySelector(`.operand[data-operand="${k}"]`);
    const name = fig ? fig.dataset.name : 'operand ' + k;
    const verb = fig && fig.dataset.input === '1' ? (fetched ? 'copied in now' : 'already in VMEM')
                                               : (fetched ? 'written back after this step' : 'kept in VMEM');
    lines.push(`  ${name}: block (${key}) ${verb}`);
  });
  sec.querySelector('.stepinfo').textContent = lines.join('\n');
  sec.dataset.step = step;
}
WALKS.forEach((walk, n) => {
  const sec = document.getElementById('walk' + n);
  sec.querySelector('input').addEventListener('input', e => show(n, +e.target.value));
  sec.querySelectorAll('.gridmap rect[data-step]').forEach(r =>
    r.addEventListener('click', () => show(n, +r.dataset.step)));
  const m = /step=(\d+)/.exec(location.hash);
  show(n, m ? +m[1] : 0);
});
let current = 0;
document.addEventListener('focusin', e => {
  const sec = e.target.closest && e.target.closest('section.walk');
  if (sec) current = +sec.id.slice(4);
});
document.addEventListener('keydown', e => {
  if (!WALKS.length) return;
  const sec = document.getElementById('walk' + current), step = +sec.dataset.step;
  if (e.key === 'ArrowRight' || e.key === 'ArrowDown') { show(current, step + 1); e.preventDefault(); }
  if (e.key === 'ArrowLeft' || e.key === 'ArrowUp') { show(current, step - 1); e.preventDefault(); }
});
"""


def _steps_of(gw: GridWalk) -> list[list[int]]:
    return [[int(v) for v in p] for p in walk.grid_steps(gw.grid)]


def _section(n: int, gw: GridWalk) -> str:
    steps = len(_steps_of(gw))
    head = (f"<h2>{escape.escape(gw.kernel)}() · grid {escape.escape(str(tuple(gw.grid)))} · "
            f"{steps} steps" + (f" · <span class='config'>{escape.escape(gw.config)}</span>"
                                if gw.config else "") + "</h2>")
    failed = (f"<p class='failed'>this run failed ({escape.escape(gw.failed)}): the walk its "
              "index maps plan is drawn; wrong output blocks are outlined in red.</p>"
              if gw.failed else "")
    control = (f"<div class='control'><label>step <input type='range' min='0' "
               f"max='{max(steps - 1, 0)}' value='0' aria-label='grid step'></label> "
               "(slider, or the arrow keys)<span class='stepinfo'></span></div>")
    figures = [_grid_map(gw)] + [_operand_figure(k, o) for k, o in enumerate(gw.operands)]
    return (f"<section class='walk' id='walk{n}' data-kernel='{escape.escape(gw.kernel)}'>"
            + head + failed + control + "".join(figures) + "</section>")


def _grid_map(gw: GridWalk) -> str:
    """The grid over its last two axes (the ones a learner reasons about: q block and kv
    block, row block and k step), every step a cell coloured by its MXU work; the
    leading axes' steps are summed into the same cells."""
    grid = tuple(gw.grid) or (1,)
    rows, cols = (grid[-2], grid[-1]) if len(grid) >= 2 else (1, grid[-1])
    work = np.zeros((rows, cols))
    counted = bool(gw.work)
    fetches = np.zeros((rows, cols), int)
    first = {}
    for s, point in enumerate(_steps_of(gw)):
        r, c = (point[-2], point[-1]) if len(point) >= 2 else (0, point[-1] if point else 0)
        first.setdefault((r, c), s)
        if counted:
            work[r, c] += gw.work[s]
        fetches[r, c] += sum(bool(o.fetched[s]) for o in gw.operands if o.is_input)
    most = work.max() or 1
    cells = []
    shown_r, shown_c = min(rows, MOST_CELLS), min(cols, MOST_CELLS)
    for r in range(shown_r):
        for c in range(shown_c):
            if counted and work[r, c] == 0:
                kind = "idle" if fetches[r, c] == 0 else "wasted"
                fill = PADDING if kind == "idle" else SKIPPED
                label = "·"
            else:
                kind, fill = "work", _blend(work[r, c] / most if counted else 0.6)
                label = ""
            tip = (f"grid point (.., {r}, {c}): " +
                   (f"{int(work[r, c]):,} MXU flops" if counted else "work not counted") +
                   (", nothing fetched: a skipped or padding step" if kind == "idle" else
                    ", but blocks copied: traffic for nothing" if kind == "wasted" else ""))
            cells.append(_cell(c, r, fill, label, tip, f"data-point='{r},{c}' "
                               f"data-step='{first.get((r, c), 0)}' data-kind='{kind}'"))
    lead = (f"; the {int(np.prod(grid[:-2]))} steps of the leading axes "
            f"{tuple(grid[:-2])} summed into each cell" if len(grid) > 2 else "")
    more = " (first 48 drawn)" if rows > MOST_CELLS or cols > MOST_CELLS else ""
    caption = (f"the grid: rows are grid axis {max(len(grid) - 2, 0)} ({rows} steps), columns "
               f"grid axis {len(grid) - 1} ({cols} steps){lead}{more}. Colour: MXU work per "
               "step; · no MXU work.")
    return (f"<figure class='gridmap'>{_svg(cells, shown_c, shown_r, 'grid axis ' + str(len(grid) - 1), 'grid axis ' + str(max(len(grid) - 2, 0)))}"
            f"<figcaption>{escape.escape(caption)}</figcaption></figure>")


def _operand_figure(k: int, o: OperandWalk) -> str:
    """An operand's blocks in its true orientation: rows along its second-to-last dim,
    columns along its last; its leading dims one panel each."""
    blocks = o.blocks()
    rank = len(o.extent) or (len(next(iter(blocks))) if blocks else 1)
    extent = [e or 0 for e in o.extent] if o.extent else [0] * rank
    for index in blocks:
        extent = [max(e, i + 1) for e, i in zip(extent, index)]
    rows, cols = (extent[-2], extent[-1]) if rank >= 2 else (1, extent[-1])
    leads = sorted({tuple(i[:-2]) for i in blocks}) if rank > 2 else [()]
    if rank > 2:   # every leading index of the array, reached or not
        leads = sorted(set(leads) | set(np.ndindex(*extent[:-2]))) if \
            int(np.prod(extent[:-2])) <= MOST_PANELS else leads
    wrong = set(map(tuple, o.wrong))
    panels = []
    for lead in leads[:MOST_PANELS]:
        cells = []
        for r in range(min(rows, MOST_CELLS)):
            for c in range(min(cols, MOST_CELLS)):
                index = tuple(lead) + ((r, c) if rank >= 2 else (c,))
                steps = blocks.get(index)
                copies = len(steps) if steps else 0
                if steps is None:
                    fill, label, kind = NEVER, "", "never"
                    tip = f"block {index}: no step reaches it"
                else:
                    fill = _blend(0.25 if copies <= 1 else 0.85)
                    label = str(copies) if copies else "0"
                    kind = "again" if copies > 1 else "once"
                    verb = "copied in" if o.is_input else "written back"
                    tip = f"block {index}: {verb} at steps {steps[:12]}" + \
                        ("..." if len(steps) > 12 else "")
                extra = ""
                if index in wrong:
                    kind, extra = kind + " wrong", f"<rect x='{c * CELL + 2}' y='{r * CELL + 2}' " \
                        f"width='{CELL - 6}' height='{CELL - 6}' fill='none' stroke='{WRONG}' " \
                        "stroke-width='3' class='wrongmark'/>"
                    tip += " · WRONG in the failing check"
                cells.append(_cell(c, r, fill, label, tip,
                                   f"data-block='{','.join(map(str, index))}' data-kind='{kind}'"
                                   + (f" stroke='{AGAIN}' stroke-width='2'" if copies > 1 else ""),
                                   extra))
        name = f"{o.name}[{', '.join(map(str, lead))}, :, :]" if lead else o.name
        panels.append(f"<div class='panel'><div>{escape.escape(name)}</div>"
                      f"{_svg(cells, min(cols, MOST_CELLS), min(rows, MOST_CELLS), _dim_label(o, -1), _dim_label(o, -2) if rank >= 2 else '')}</div>")
    more = len(leads) - MOST_PANELS
    reached = sum(1 for s in blocks.values() if s)
    total = int(np.prod(extent)) if all(extent) else reached
    caption = (f"{o.name} ({'input' if o.is_input else 'output'}): array "
               f"{list(o.array_shape)} {o.dtype}, blocks {_block_text(o.block_shape)}; "
               f"{reached} of {total} blocks reached, "
               f"{sum(len(s) for s in blocks.values())} copies"
               + (f"; {more} more panels not drawn" if more > 0 else ""))
    return (f"<figure class='operand' data-operand='{k}' data-name='{escape.escape(o.name)}' "
            f"data-input='{int(o.is_input)}'>{''.join(panels)}"
            f"<figcaption>{escape.escape(caption)}</figcaption></figure>")


def _dim_label(o: OperandWalk, d: int) -> str:
    if not o.array_shape or len(o.array_shape) < -d:
        return ""
    dim = len(o.array_shape) + d
    block = o.block_shape[d] if o.block_shape else None
    return f"dim {dim} ({o.array_shape[d]}, blocks of {block if block else 1})"


def _block_text(shape) -> str:
    return "(" + ", ".join("squeezed" if b is None else str(b) for b in shape) + ")"


def _svg(cells: list[str], cols: int, rows: int, across: str, down: str) -> str:
    width, height = max(cols * CELL + 40, 260), rows * CELL + 40
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
            f"role='img'><g transform='translate(24,20)'>{''.join(cells)}</g>"
            f"<text x='24' y='13' font-size='11' fill='{INK}'>{escape.escape(across)} →</text>"
            f"<text x='12' y='{20 + rows * CELL}' font-size='11' fill='{INK}' "
            f"transform='rotate(-90 12 {20 + rows * CELL})'>{escape.escape(down)} →</text></svg>")


def _cell(c: int, r: int, fill: str, label: str, tip: str, attributes: str = "",
          extra: str = "") -> str:
    ink = ink_for(fill)
    return (f"<g class='cell'><title>{escape.escape(tip)}</title><rect x='{c * CELL}' "
            f"y='{r * CELL}' width='{CELL - 2}' height='{CELL - 2}' fill='{fill}' "
            f"{attributes}/>{extra}<text x='{c * CELL + CELL / 2 - 1}' y='{r * CELL + CELL / 2 + 4}' "
            f"font-size='11' text-anchor='middle' fill='{ink}'>{escape.escape(label)}</text></g>")


def _legend() -> str:
    def swatch(fill, stroke="none", dash=""):
        return (f"<svg width='18' height='18'><rect x='1' y='1' width='16' height='16' "
                f"fill='{fill}' stroke='{stroke}' stroke-width='3' {dash}/></svg>")
    items = [(swatch(_blend(1.0)), "grid step with MXU work (darker: more)"),
             (swatch(PADDING), "step with no MXU work, nothing copied: skipped or padding (·)"),
             (swatch(SKIPPED), "step with no MXU work that still copies blocks (·)"),
             (swatch(_blend(0.25)), "block copied once (the number: its copies)"),
             (swatch(_blend(0.85), AGAIN), "block copied more than once: a re-fetch"),
             (swatch(NEVER), "block no step reaches"),
             (swatch("#fff", NOW), "the current step's block, already in VMEM"),
             (swatch("#fff", FETCH, "stroke-dasharray='4 2'"), "the current step's block, copied now"),
             (swatch("#fff", WRONG), "output block wrong in the failing check")]
    return "<div class='legend'>" + "".join(f"<span>{s}{escape.escape(t)}</span>"
                                            for s, t in items) + "</div>"


def _wrong_svg(wrong) -> str:
    rows = len(wrong)
    cols = max((len(r) for r in wrong), default=0)
    cells = "".join(f"<rect x='{c * 18}' y='{r * 18}' width='16' height='16' "
                    f"fill='{WRONG if bad else '#5bb85b'}'/>"
                    for r, row in enumerate(wrong) for c, bad in enumerate(row))
    return f"<svg xmlns='http://www.w3.org/2000/svg' width='{cols * 18}' height='{rows * 18}'>{cells}</svg>"


def _blend(t: float) -> str:
    r, g, b = (round(a + (z - a) * min(max(t, 0.0), 1.0)) for a, z in zip(LIGHT, DARK))
    return f"#{r:02x}{g:02x}{b:02x}"


def ink_for(fill: str) -> str:
    """Near-black or white, whichever contrasts more with ``fill``."""
    return INK if contrast(INK, fill) >= contrast(PAPER, fill) else PAPER


def contrast(a: str, b: str) -> float:
    """WCAG 2's contrast ratio of two '#rrggbb' colours (1 to 21)."""
    def luminance(colour):
        channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        r, g, b = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * r + 0.7152 * g + 0.0722 * b
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)
