"""ragged_dot's lesson machinery: what the tests know of a grouped matmul besides its
right answer.

* the visits and the metadata worked out for a list of group sizes (``visits_of``,
  ``metadata_of``), with the known wrong rules a make_group_metadata breaks, and the
  check that names them (``check_metadata``);
* models of the known wrong kernels (an unmasked store, an accumulator not reset, rows
  numbered from the visit, a bf16 running sum...) and the checks that recognise them in
  an output: rows numbered wrong, experts a tgmm never stored, groups whose several
  visits are wrong, tgmm's index maps walked at every real visit;
* the budgets: dot flops of the real visits (``dot_flops``), the bytes a gmm and a tgmm
  move (``gmm_bytes``, ``tgmm_bytes``: a block fetched when a real visit's index changes),
  and the known wrong schedules as (flops, bytes) pairs;
* the differentiable puzzle's three kernels, told apart by the arguments they read and
  each held to the grid, blocks, work and bytes of the puzzle it builds on.
"""
import functools
import math

from ..checking import check, fail, raised, tpu_sized
from ..frozen import np
from ..structure import same_grid
from .common import cdiv, f64


# --- the visits and the metadata, worked out here ---------------------------------

def visits_of(sizes, M, tm, *, visit_empty=False, owned_only=False, past_end=False,
              from_zero=False, unclamped=False):
    """(group, row tile) of every visit, in grid order. The known wrong ones: owned_only,
    a group visits only the tiles whose first row is its own (a tile it shares at its
    start is forgotten); past_end, a group's last tile is end // tm (a visit too many
    when it ends on a tile boundary); from_zero, each group's tiles counted from 0;
    unclamped, an empty group at the very end visits tile M // tm (past the last when
    tm divides M)."""
    tiles_m = cdiv(M, tm)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    visits = []
    for g, size in enumerate(sizes):
        start, end = int(offsets[g]), int(offsets[g + 1])
        if size == 0:
            if visit_empty:
                visits.append((g, 0 if from_zero else start // tm if unclamped else
                               min(start // tm, tiles_m - 1)))
            continue
        first = cdiv(start, tm) if owned_only else start // tm
        last = end // tm if past_end else (end - 1) // tm
        visits += [(g, t - first if from_zero else t) for t in range(first, last + 1)]
    return visits


def metadata_of(sizes, M, tm, *, visit_empty=False, padding="last", offsets="starts",
                count="visits", **wrong):
    """(group_offsets, group_ids, m_tile_ids, num_tiles) as make_group_metadata returns
    them. padding: what the entries past num_tiles hold ("last" real visit, "zero",
    "last_group": the last group and tile, as jnp.repeat pads, or "runs_on": the last
    real visit's group, its tile counting on, + 1, + 2, ...). The known wrong ones
    besides: offsets="ends" (the groups' ends and M, no leading 0), count="steps"
    (num_tiles counts every step of the visit axis), and visits_of's (``wrong``)."""
    E, tiles_m = len(sizes), cdiv(M, tm)
    steps = tiles_m + E - 1
    visits = visits_of(sizes, M, tm, visit_empty=visit_empty, **wrong)
    last = visits[-1] if visits else (0, 0)
    fill = {"last": [last] * steps, "zero": [(0, 0)] * steps,
            "last_group": [(E - 1, tiles_m - 1)] * steps,
            "runs_on": [(last[0], last[1] + n) for n in range(1, steps + 1)]}[padding]
    rows = (visits + fill)[:steps]
    ends = np.cumsum(sizes)
    group_offsets = (np.concatenate([[0], ends]) if offsets == "starts" else
                     np.concatenate([ends, [M]])).astype(np.int32)
    return (group_offsets, np.array([g for g, _ in rows], np.int32),
            np.array([t for _, t in rows], np.int32),
            np.int32(len(visits) if count == "visits" else steps))


# The known wrong metadata: each changes one rule, and what it gives follows from it.
METADATA_MISTAKES = {"shared_tile_forgotten": dict(owned_only=True),
                     "last_tile_past_end": dict(past_end=True),
                     "tile_ids_from_zero": dict(from_zero=True),
                     "empty_end_unclamped": dict(unclamped=True),
                     "padding_zero": dict(padding="zero"),
                     "padding_last_group": dict(padding="last_group"),
                     "padding_runs_on": dict(padding="runs_on"),
                     "num_tiles_all_steps": dict(count="steps"),
                     "offsets_without_zero": dict(offsets="ends")}
METADATA_NAMES = ["group_offsets", "group_ids", "m_tile_ids", "num_tiles"]
METADATA_LABELS = {"group_offsets": "offsets", "group_ids": "group_ids",
                   "m_tile_ids": "m_tile_ids", "num_tiles": "num_tiles"}


def metadata_mistakes(sizes, M, tm, *, visit_empty):
    """name -> the metadata each known mistake gives (METADATA_MISTAKES, and the flag
    visit_empty_groups ignored), for make_group_metadata(sizes, M, tm, visit_empty)."""
    mistakes = {**METADATA_MISTAKES, "empty_groups_flag_ignored": dict(visit_empty=not visit_empty)}
    return {key: metadata_of(sizes, M, tm, **{"visit_empty": visit_empty, **wrong})
            for key, wrong in mistakes.items()}


def check_metadata(yours, expected, mistakes):
    """The four arrays of make_group_metadata, compared with the expected ones. A known
    wrong metadata that all four of yours match is named (one rule broken shows in
    several arrays, and only all of them together tell the rule); else the first wrong
    array is named, with what its entries mean and where yours go astray.
    yours: what make_group_metadata returned (a tuple of four arrays, else it fails);
    mistakes: name -> the metadata a known mistake gives (``metadata_mistakes``)."""
    if not (isinstance(yours, (tuple, list)) and len(yours) == 4):
        fail("returned", "make_group_metadata returns a tuple of four arrays: (group_offsets, "
             "group_ids, m_tile_ids, num_tiles).", [("returned", f"{type(yours).__name__}")])
    yours = [np.asarray(y) for y in yours]

    def same(a, b):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and np.array_equal(a, b)

    if all(same(y, e) for y, e in zip(yours, expected)):
        return
    for key, known in mistakes.items():
        if all(same(y, w) for y, w in zip(yours, known)):
            n = next(n for n in range(4) if not same(yours[n], expected[n]))
            fail(key, (
                f"your metadata matches a known wrong one ({key.replace('_', ' ')})."),
                metadata_facts(yours, expected), name=METADATA_NAMES[n])
    for n, name in enumerate(METADATA_NAMES):
        if yours[n].shape != expected[n].shape or yours[n].dtype != expected[n].dtype:
            check(yours[n], expected[n], name=name, blocks=(1,) * expected[n].ndim,
                  axes="v" if expected[n].ndim else None)
        if not same(yours[n], expected[n]):
            fail("entries", f"the entries of {name} are wrong.",
                 metadata_facts(yours, expected, only=n), name=name)


def metadata_facts(yours, expected, only=None):
    """Rows for the wrong arrays of the metadata (or the one numbered ``only``): yours
    and the expected one, and the first entry (visit) where they part."""
    rows = []
    for n, name in enumerate(METADATA_NAMES):
        y, e = np.asarray(yours[n]), np.asarray(expected[n])
        if (only is not None and n != only) or (y.shape == e.shape and np.array_equal(y, e)):
            continue
        label = METADATA_LABELS[name]
        if e.ndim == 0:
            rows.append((label, f"expected {int(e)} · yours {y.tolist()}"))
            continue
        rows.append((label, f"expected {e.tolist()}\nyours    {y.tolist()}"))
        if y.shape == e.shape:
            first = int(np.argmax(y != e))
            rows.append(("first", f"{name}[{first}]: expected {int(e[first])} · yours "
                                  f"{int(y[first])}"))
    return rows


# --- gmm's known wrong outputs ----------------------------------------------------

def following_visits(lhs, rhs, sizes, tm, *, masked=True, reset=True, keep=True):
    """gmm's output, float64, from a kernel that follows the visits: masked=False stores
    a visit's whole tile (its group's expert on every row of the tile); reset=False
    keeps one accumulator across visits (never zeroed for a new group); keep=False
    writes zeros on the rows of the tile that are not the visit's group's (where it
    should keep what an earlier visit stored)."""
    lhs, rhs = f64(lhs, rhs)
    M = lhs.shape[0]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    out = np.zeros((M, rhs.shape[2]))
    acc = np.zeros((tm, rhs.shape[2]))
    for g, t in visits_of(sizes, M, tm):
        rows = np.arange(t * tm, min((t + 1) * tm, M))
        product = np.zeros((tm, rhs.shape[2]))
        product[:len(rows)] = lhs[rows] @ rhs[g]
        acc = product if reset else acc + product
        mine = (rows >= offsets[g]) & (rows < offsets[g + 1]) if masked else np.ones(len(rows),
                                                                                     bool)
        out[rows[mine]] = acc[:len(rows)][mine]
        if not keep:
            out[rows[~mine]] = 0
    return out


def kept_columns(K, tk):
    """The columns along K a kernel keeps when it masks every K block to its first
    K % tk columns (the last block's bound used on all of them)."""
    return np.concatenate([np.arange(k, k + K % tk) for k in range(0, K, tk)])


def rows_numbered_wrong(lhs, rhs, sizes, tm, numbering):
    """A masked gmm whose rows are numbered wrongly, in float64: "visit" numbers a tile's
    rows from visit * tm (the visit, not the tile it fetched), "tile" from 0 (the iota
    alone, as if every tile were the first). Returns its output and which rows it wrote:
    the others keep what the output buffer held, which no NumPy model knows."""
    lhs, rhs = f64(lhs, rhs)
    M = lhs.shape[0]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    out, written = np.zeros((M, rhs.shape[2])), np.zeros(M, bool)
    for visit, (g, t) in enumerate(visits_of(sizes, M, tm)):
        rows = np.arange(t * tm, min((t + 1) * tm, M))
        numbered = (visit * tm if numbering == "visit" else 0) + np.arange(len(rows))
        mine = rows[(numbered >= offsets[g]) & (numbered < offsets[g + 1])]
        out[mine], written[mine] = lhs[mine] @ rhs[g], True
    return out, written


TOLERANCE_OF = {"float32": 1e-4, "bfloat16": 2e-2}


def check_row_numbering(yours, expected, lhs, rhs, sizes, tm, dtype, *, known=()):
    """Fails when the output is what a masked kernel with wrongly numbered rows writes,
    on every row it writes, and that kernel tells itself apart: some of the rows it
    writes are wrong (the surer sign: named first), or the rows it leaves unwritten are
    exactly the wrong ones. known: the other known wrong answers (functions), which
    check's likely names instead."""
    tolerance = TOLERANCE_OF.get(dtype, 0)
    right_rows = np.array([close_to(y, e, tolerance) for y, e in zip(yours, expected)])
    if right_rows.all() or any(close_to(yours, wrong(), tolerance) for wrong in known):
        return
    found = []   # (sure, key, numbering, rows written)
    for key, numbering in (("rows_from_visit", "visit"), ("rows_from_zero", "tile")):
        wrong, written = rows_numbered_wrong(lhs, rhs, sizes, tm, numbering)
        wrong = wrong.astype(dtype)
        if not written.any() or not close_to(yours[written], wrong[written], tolerance):
            continue
        sure = not close_to(wrong[written], expected[written], tolerance)
        if sure or np.array_equal(~right_rows, ~written):
            found.append((sure, key, numbering, int(written.sum())))
    if found:
        _, key, numbering, rows = max(found, key=lambda f: f[0])
        fail(key, (
            f"your output is what a kernel writes that numbers a tile's rows "
            f"{'from its visit, visit * tm' if numbering == 'visit' else 'from 0'}."),
            [("rows", f"yours match that kernel on all {rows} rows it writes")], name="output")


def in_bf16(parts):
    """A running sum rounded to bf16 at every step, each part rounded first, in float64:
    what a bf16 accumulator holds at the end."""
    total = np.zeros_like(parts[0])
    for part in parts:
        total = (total + part.astype("bfloat16").astype(np.float64)).astype("bfloat16") \
            .astype(np.float64)
    return total


def grouped_matmul_in_bf16(lhs, rhs, sizes, tk):
    """gmm's output from a bf16 accumulator: each row's K blocks summed in bf16."""
    lhs, rhs = f64(lhs, rhs)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    out = np.zeros((lhs.shape[0], rhs.shape[2]))
    for e in range(len(sizes)):
        rows = slice(offsets[e], offsets[e + 1])
        out[rows] = in_bf16([lhs[rows, k:k + tk] @ rhs[e][k:k + tk]
                             for k in range(0, lhs.shape[1], tk)])
    return out


# --- tgmm's known wrong outputs ---------------------------------------------------

def transposed_grouped_matmul_in_bf16(lhs, grad, sizes, tm):
    """tgmm's output from a bf16 accumulator: each group's row tiles summed in bf16."""
    lhs, grad = f64(lhs, grad)
    M = lhs.shape[1]
    out = np.zeros((len(sizes), lhs.shape[0], grad.shape[1]))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    for e in range(len(sizes)):
        tiles = [range(max(t, offsets[e]), min(t + tm, offsets[e + 1]))
                 for t in range(0, M, tm)]
        parts = [lhs[:, rows] @ grad[rows] for rows in tiles if len(rows)]
        if parts:
            out[e] = in_bf16(parts)
    return out


def tgmm_unmasked(lhs, grad, sizes, tm):
    """tgmm's output, float64, if each visit summed its whole row tile."""
    lhs, grad = f64(lhs, grad)
    M = lhs.shape[1]
    out = np.zeros((len(sizes), lhs.shape[0], grad.shape[1]))
    for g, t in visits_of(sizes, M, tm):
        rows = slice(t * tm, min((t + 1) * tm, M))
        out[g] += lhs[:, rows] @ grad[rows]
    return out


def never_written(out, expected, blocks, tolerance):
    """The experts of a tgmm's output [E, K, N] that no visit stored: each of their
    (tk, tn) blocks is still NaN (a fresh buffer), or holds, wrongly, an exact copy of
    a right and non-zero block of another expert (an output buffer that a visit of that
    expert left in VMEM, written back for this one)."""
    out, expected = f64(out, expected)
    E, K, N = out.shape
    tk, tn = blocks
    scale = float(np.abs(expected).max(initial=0.0)) or 1.0
    windows = [(slice(k, k + tk), slice(n, n + tn)) for k in range(0, K, tk)
               for n in range(0, N, tn)]

    def right(e, window):
        return np.allclose(out[e][window], expected[e][window], rtol=tolerance,
                           atol=tolerance * scale)

    def key(block):
        return block.shape, block.tobytes()

    copies = {key(out[f][window]) for f in range(E) for window in windows
              if right(f, window) and np.any(out[f][window])}

    def copied(e, window):   # the very bytes of another expert's block: a stale buffer
        mine = out[e][window]
        return bool(np.any(mine)) and any(key(out[f][window]) == key(mine)
                                          for f in range(E) if f != e)

    def stale(e, window):
        mine = out[e][window]
        return bool(np.isnan(mine).all()) or (not right(e, window) and key(mine) in copies) \
            or copied(e, window)

    return {e for e in range(E) if all(stale(e, window) for window in windows)}


def check_experts_written(out, expected, sizes, *, blocks, tolerance, name="output",
                          stored=None):
    """Fails when whole experts of a tgmm's output [E, K, N] were never stored (see
    never_written), naming them and saying why from which they are. An empty group's
    block is written only by its own visit (visit_empty_groups=True); every group's
    block by the store at its last visit, and the last real visit (num_tiles - 1) is
    the last of its group although no other group's visit follows it.

    stored: the output's blocks (e, k, n) some grid step stored into, from the walk of
    the kernel (None: not known). An expert that looks unwritten, all NaN, although its
    blocks were stored, was stored NaN: computed from memory never written."""
    never = never_written(out, expected, blocks, tolerance)
    E = len(sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    if stored is not None:
        nan_stored = {e for e in never if any(b[0] == e for b in stored)
                      and np.isnan(f64(out[e])[0]).all()}
        never -= {b[0] for b in stored}
        if nan_stored and not never:
            fail("nan", (
                "the experts' blocks were stored, but every value is NaN: what they summed "
                "was NaN. The rows past M (NaN in interpret mode) or another group's rows "
                "reached the dot unmasked (NaN * 0 is NaN: mask both lhs's columns and "
                "grad's rows to the group's rows, with jnp.where, before the dot), or the "
                "accumulator was read before a group's first visit cleared it."),
                [("nan", f"{name}: expert{'s' if len(nan_stored) > 1 else ''} "
                         f"{', '.join(map(str, sorted(nan_stored)))} of {E} NaN, though "
                         "stored"),
                 ("groups", " · ".join(f"{e}: " + (f"rows {offsets[e]}-{offsets[e + 1] - 1}"
                                                    if sizes[e] else "empty")
                                       for e in sorted(nan_stored)))], name=name)
    if not never:
        return
    empty = {e for e in range(E) if sizes[e] == 0}

    def listed(experts):
        return ", ".join(str(e) for e in sorted(experts))

    said = []     # (kind, sentence), most telling first
    left = set(never)
    last = E - 1  # the group of the last real visit, when every group has its visits
    if empty and empty <= never and empty != {E - 1}:
        said.append(("empty_unwritten", (
            f"no visit wrote the experts of the empty groups ({listed(empty)}): a block "
            "of the output is written only by a visit that names it, and an empty group "
            "has one only with make_group_metadata(..., visit_empty_groups=True). There "
            "the kernel starts, adds nothing and stores the zeros.")))
        left -= empty
        last = max(set(range(E)) - empty)   # without them, the last group with rows
    if last in left:
        follows = ("no other group's visit follows the last real visit (the padding steps "
                   "after it repeat it), so the store must also run at visit num_tiles - 1")
        if last not in empty:
            sentence = (f"expert {last}'s block was never written, and its group holds the "
                        f"last real visit: {follows}.")
        elif empty == {last}:   # no other empty group to tell whether they get visits
            sentence = (f"expert {last}, an empty group, was never written: either it has "
                        "no visit (an empty group gets one only with visit_empty_groups="
                        f"True), or its visit, the last real one, does not store: {follows}.")
        else:
            sentence = (f"expert {last}, an empty group, was never written, though the other "
                        f"empty groups were: its visit is the last real one, and {follows}.")
        said.append(("last_unwritten", sentence))
        left.discard(last)
    if left:
        said.append(("experts_unwritten", (
            f"no visit stored the blocks of expert{'s' if len(left) > 1 else ''} "
            f"{listed(left)}: a group's block is "
            "stored at its last visit, the one whose next visit belongs to another group, "
            "into the block out's index map names for this visit's group.")))
    facts = [("unwritten", f"{name}: expert{'s' if len(never) > 1 else ''} {listed(never)} "
                           f"of {E} never stored (still NaN, or another expert's block left "
                           "in the output buffer)"),
             ("groups", " · ".join(f"{e}: " + (f"rows {offsets[e]}-{offsets[e + 1] - 1}"
                                                if sizes[e] else "empty")
                                   for e in sorted(never)))]
    fail(said[0][0], " ".join(sentence for _, sentence in said), facts, name=name)


def output_block(site):
    """The BlockSpec'd output operand of a kernel (its one output)."""
    return next(block for block in site.call.blocks if not block.is_input)


def stored_blocks(ran, site=None):
    """The blocks (e, k, n) of the output of the kernel at ``site`` (default: the
    program's first) that some grid step stored into, from the walk of the kernel, for
    check_experts_written; None where not known, and in a tpu-sized configuration (the
    walk of every grid step would take longer than the kernel)."""
    if tpu_sized():
        return None
    return ran.stored_blocks(output_block(site or ran.program.sites[0]))


# What each of tgmm's index maps names at a real visit, grid (n, k, visit), and why.
TGMM_INDEX_MAPS = {
    "lhs": ("(k, m_tile_ids[visit])", "lhs is [K, M], so its first block index runs along "
            "K (the grid's k) and its second along M (the visit's row tile)"),
    "grad": ("(m_tile_ids[visit], n)", "grad is [M, N]: the visit's row tile, then the "
             "grid's n"),
    "out": ("(group_ids[visit], k, n)", "the output is [E, K, N]: the visit's group, then "
            "the grid's k and n, in the order of the output's dims"),
}


def check_tgmm_index_maps(ran, lhs, grad, sizes, M, tm):
    """The blocks tgmm's index maps name at every real visit (an empty group's visit
    reads nothing, so only its output block counts): a swapped pair of block indices
    stays inside the arrays when they have as many blocks along both dims, and only
    the values would say something is wrong."""
    _, group_ids, m_tile_ids, num_tiles = metadata_of(sizes, M, tm, visit_empty=True)
    prefetch = [np.asarray(v) for run in ran.executed for v in run.prefetch]
    if not all(any(v.shape == a.shape and np.array_equal(v, a) for v in prefetch)
               for a in (group_ids, m_tile_ids)):
        return   # other visits than tgmm's: the values say what that does
    operands = {"lhs": ran.blocks_from(lhs), "grad": ran.blocks_from(grad),
                "out": [output_block(ran.program.sites[0])]}
    for label, blocks in operands.items():
        for block in blocks:
            for steps, indices in ran.block_indices(block) or ():
                for (n, k, visit), index in zip(steps.tolist(), indices.tolist()):
                    if visit >= num_tiles or (label != "out" and not sizes[group_ids[visit]]):
                        continue
                    group, tile = int(group_ids[visit]), int(m_tile_ids[visit])
                    want = {"lhs": (k, tile), "grad": (tile, n), "out": (group, k, n)}[label]
                    if tuple(index) == want:
                        continue
                    formula, why = TGMM_INDEX_MAPS[label]
                    fail("index_map", (
                        f"{label}'s index map names block {shown(index)} at grid step (n={n}, "
                        f"k={k}, visit={visit}), where that visit (group {group}, row tile "
                        f"{tile}) needs block {shown(want)}: {why}. The index map returns "
                        f"{formula}."),
                        [("index map", f"{label} at step ({n}, {k}, {visit}): expected "
                                       f"{shown(want)} · yours {shown(index)}")], name="output")


def several_visits_wrong(out, expected, sizes, M, tm, tolerance):
    """The groups with several visits, when exactly their experts are wrong and some
    group with one visit is right (what a tgmm gets that does not carry its accumulator
    across a group's visits), else an empty set."""
    visits = {}
    for g, _ in visits_of(sizes, M, tm):
        visits[g] = visits.get(g, 0) + 1
    several = {g for g, count in visits.items() if count > 1}
    once = {g for g, count in visits.items() if count == 1}
    wrong = {e for e in range(len(sizes)) if not close_to(out[e], expected[e], tolerance)}
    return several if several and once and wrong == several else set()


def check_several_visits(out, expected, sizes, M, tm, tolerance, *, known=()):
    """Fails when only the experts whose group has several visits are wrong (see
    several_visits_wrong), and the output is none of the known wrong answers (``known``:
    functions, which check's likely names instead)."""
    several = several_visits_wrong(out, expected, sizes, M, tm, tolerance)
    if several and not any(close_to(out, wrong(), tolerance) for wrong in known):
        fail("several_visits_wrong", (
            "only the experts whose group has several visits are wrong, those with one "
            "visit right: the accumulator is not carried right across a group's visits. "
            "Clear it at a group's first visit (visit == 0, or the previous visit's group "
            "differs), add to it at every real visit, and store it at the group's last (the "
            "next visit's group differs, or visit == num_tiles - 1): which phase runs under "
            "which condition?"),
            [("groups", "wrong: " + ", ".join(map(str, sorted(several))) + " (several "
                        "visits each) · right: the groups with one visit")], name="output")


def close_to(yours, expected, tolerance):
    """Within tolerance of expected, relative to its values and its largest one."""
    yours, expected = f64(yours, expected)
    scale = float(np.abs(expected).max(initial=0.0)) or 1.0
    return np.allclose(yours, expected, rtol=tolerance or 0, atol=(tolerance or 0) * scale)


def shown(shape):
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + \
        ("," if len(shape) == 1 else "") + ")"


# --- work and bytes, worked out from the visits -----------------------------------

def moved(indices, block, shape, itemsize):
    """Bytes a pipeline moves for a block whose index at each grid step is indices[s]: a
    copy whenever the index changes (and at the first step), of the in-bounds part."""
    total, before = 0, None
    for index in indices:
        if index != before:
            total += math.prod(min(b, n - i * b) for i, b, n in zip(index, block, shape))
        before = index
    return total * itemsize


def dot_flops(sizes, M, K, N, tm, tk, tn, *, visit_empty=False, visits=None):
    """Dot flops of gmm on (tm, tk) x (tk, tn) blocks: one per real visit, K block and N
    block (visits: that many visits instead)."""
    if visits is None:
        visits = len(visits_of(sizes, M, tm, visit_empty=visit_empty))
    return visits * cdiv(K, tk) * cdiv(N, tn) * 2 * tm * tk * tn


def gmm_bytes(M, K, N, E, sizes, tm, tk, tn, itemsize, *, visit_empty=False):
    """(reference, minimum) bytes of gmm: lhs and rhs blocks fetched when a real visit's
    block changes (steps past num_tiles fetch nothing new), the output written once.
    visit_empty: as a gmm that also visits each empty group (and fetches its expert)."""
    steps = [(n, g, t, k) for n in range(cdiv(N, tn))
             for g, t in visits_of(sizes, M, tm, visit_empty=visit_empty)
             for k in range(cdiv(K, tk))]
    lhs = moved([(t, k) for n, g, t, k in steps], (tm, tk), (M, K), itemsize)
    rhs = moved([(g, k, n) for n, g, t, k in steps], (1, tk, tn), (E, K, N), itemsize)
    used = int((np.asarray(sizes) > 0).sum())
    return lhs + rhs + M * N * itemsize, (M * K + used * K * N + M * N) * itemsize


def tgmm_bytes(M, K, N, E, sizes, tm, tk, tn, itemsize):
    steps = [(n, k, g, t) for n in range(cdiv(N, tn)) for k in range(cdiv(K, tk))
             for g, t in visits_of(sizes, M, tm, visit_empty=True)]
    lhs = moved([(k, t) for n, k, g, t in steps], (tk, tm), (K, M), itemsize)
    grad = moved([(t, n) for n, k, g, t in steps], (tm, tn), (M, N), itemsize)
    return lhs + grad + E * K * N * itemsize, (K * M + M * N + E * K * N) * itemsize


def gmm_wrong_work(sizes, M, K, N, E, tm, tk, tn, itemsize):
    """The known wrong schedules of a gmm, (flops, bytes): computing on the padding
    steps too (their blocks are the last visit's, nothing new is fetched), and visiting
    the empty groups (their experts fetched)."""
    steps = cdiv(M, tm) + E - 1
    return {"padding_steps": (dot_flops(sizes, M, K, N, tm, tk, tn, visits=steps),
                              gmm_bytes(M, K, N, E, sizes, tm, tk, tn, itemsize)[0]),
            "empty_group_visits": (dot_flops(sizes, M, K, N, tm, tk, tn, visit_empty=True),
                                   gmm_bytes(M, K, N, E, sizes, tm, tk, tn, itemsize,
                                             visit_empty=True)[0])}


def tgmm_wrong_work(sizes, M, K, N, E, tm, tk, tn, itemsize):
    """The known wrong schedules of a tgmm, (flops, bytes), both moving what the right one
    moves: a dot on the padding steps too (they repeat the last real visit, so they
    compute only when the last group has rows), and a dot for each empty group's visit."""
    padding = cdiv(M, tm) + E - 1 - len(visits_of(sizes, M, tm, visit_empty=True))
    rows = len(visits_of(sizes, M, tm))
    moved = tgmm_bytes(M, K, N, E, sizes, tm, tk, tn, itemsize)[0]
    return {"padding_steps": (dot_flops(sizes, M, K, N, tm, tk, tn,
                                        visits=rows + padding * (sizes[-1] > 0)), moved),
            "empty_group_computes": (dot_flops(sizes, M, K, N, tm, tk, tn, visit_empty=True),
                                     moved)}


# --- gmm's arguments --------------------------------------------------------------

def check_gmm_rejects(gmm, lhs, rhs, sizes, *, tiling, said):
    """gmm(lhs, rhs, sizes, tiling=tiling), traced and not run, must raise a ValueError
    before any kernel is built (any ValueError: its words are the learner's). said: the
    bad argument, as the sentence names it ("rhs of shape (3, 129, 128)")."""
    import jax

    try:
        jax.eval_shape(functools.partial(gmm, tiling=tiling), lhs, rhs, sizes)
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as error:
        fail("argument_check", f"gmm({said}) should raise a ValueError that names the "
             "argument before any kernel is built; it failed later, inside JAX.",
             [("raised", raised(error))])
    fail("argument_check", f"gmm({said}) should raise a ValueError that names the argument; "
         "it raised nothing.")


# --- the differentiable puzzle's three kernels ------------------------------------

# The three kernels of ragged_dot's vjp, each named by the output it computes and told
# apart by the arguments its operands come from (found by identity: whatever order the
# kernels run in, and whatever the operands' positions in the calls).
VJP_KERNELS = {frozenset({"lhs", "rhs"}): "output", frozenset({"grad", "rhs"}): "d lhs",
               frozenset({"lhs", "grad"}): "d rhs"}
VJP_WHAT = {"output": "the forward gmm", "d lhs": "the d lhs gmm",
            "d rhs": "the d rhs tgmm"}
VJP_READS = {"output": {"lhs": "MK", "rhs": "EKN"}, "d lhs": {"grad": "MN", "rhs": "EKN"},
             "d rhs": {"lhs": "MK", "grad": "MN"}}   # the dims of each argument it reads
VJP_GRID = {"output": "(N blocks, visits, K blocks), gmm's",
            "d lhs": "(K blocks, visits, N blocks): a gmm whose output columns are K (tiles "
                     "of tk) and whose contraction is N (tiles of tn)",
            "d rhs": "(N blocks, K blocks, visits), tgmm's"}
VJP_TRAFFIC = {
    "output": "On a padding step (past num_tiles) its index maps must name the last real "
              "step's blocks, the K block included, so that nothing is fetched again.",
    "d lhs": "On a padding step (past num_tiles) its index maps must name the last real "
             "step's blocks, the block along N (its contraction) included, so that nothing "
             "is fetched again.",
    "d rhs": "Each expert's block is written once, after its group's last visit, and a "
             "padding step names the last real visit's blocks."}


def vjp_kernels(ran, arrays):
    """(output name -> the kernel (program site) that computes it, block id -> the names
    of `arrays` its value comes from), each kernel told by the arrays its operands come
    from."""
    comes_from = {}
    for name, array in arrays.items():
        for block in ran.blocks_from(array):
            comes_from.setdefault(id(block), set()).add(name)
    reads = {site.index: frozenset().union(*(comes_from.get(id(b), ()) for b in site.call.blocks))
             for site in ran.program.sites}
    found = {}
    for site in ran.program.sites:
        output = VJP_KERNELS.get(reads[site.index])
        if output is None or output in found:
            fail("kernel_roles", (
                f"your kernel {site.call.name}() reads "
                f"{' and '.join(sorted(reads[site.index])) or 'none of lhs, rhs and grad'}: "
                "jax.vjp of ragged_dot runs three kernels, each on two of the arrays: the "
                "forward gmm on lhs and rhs, the d lhs gmm on grad and rhs (each expert "
                "transposed), the d rhs tgmm on lhs (transposed) and grad."),
                [("kernels", " · ".join(f"{s.call.name}(): "
                                        f"{', '.join(sorted(reads[s.index])) or 'none'}"
                                        for s in ran.program.sites))])
        found[output] = site
    return found, comes_from


def block_shapes(block, dims, sizes, tiles):
    """The block shapes an operand may have: its dims' tiles, in the order its array holds
    the argument's dims (as the argument has them, or with the last two transposed)."""
    orders = [dims, dims[:-2] + dims[-1] + dims[-2]]
    return sorted({tuple(tiles[d] for d in order) for order in orders
                   if tuple(sizes[d] for d in order) == tuple(block.array_shape)}, key=str)


def check_vjp_structure(output, site, comes_from, *, grid, sizes, tiles):
    """One kernel of the vjp held to the puzzle it builds on: its grid, and the blocks of
    each argument it reads (tm rows, tk along K, tn along N)."""
    what, name = VJP_WHAT[output], site.call.name
    yours = tuple(site.call.grid)
    if not same_grid(yours, grid):
        whole = math.prod(g if isinstance(g, int) else 2 for g in yours) == 1
        fail("whole_array" if whole else "grid", (
            f"{what}, {name}(), runs once, over the whole arrays: like the gmm and tgmm you "
            "wrote, it walks the visits on its grid, one step per block." if whole else
            f"the grid of {what}, {name}(), is {yours}; the puzzle's is {VJP_GRID[output]}."),
            [("grid", f"{what}: expected {grid} · yours {yours or '()'}")], name=output)
    for block in site.call.blocks:
        names = comes_from.get(id(block), set())
        if len(names) != 1:
            continue        # a table built inside (None), or an operand mixing arguments
        (argument,) = names
        allowed = block_shapes(block, VJP_READS[output][argument], sizes, tiles)
        if tuple(block.block_shape) not in allowed:
            expected = " or ".join(map(shown, allowed)) or shown(
                tuple(tiles[d] for d in VJP_READS[output][argument]))
            fail("blocks_shape", (
                f"{what}, {name}(), reads {argument} in blocks of shape "
                f"{shown(block.block_shape)}; the puzzle's are {expected}: tm rows, tk "
                "along K and tn along N, whichever way the array is transposed."),
                [("blocks", f"{argument} in {name}(): expected {expected} · yours "
                            f"{shown(block.block_shape)} of {tuple(block.array_shape)}")],
                name=output)


def check_vjp_counts(ran, output, site, *, flops, moved):
    """One kernel of the vjp: the work of its real visits only, and the bytes they move
    (reference, minimum)."""
    what, name = VJP_WHAT[output], site.call.name
    ran.work    # every kernel countable
    done = sum(counts.flops for run, counts in zip(ran.executed, ran.counts)
               if run.site.index == site.index)
    if done != flops:
        fail("work_high" if done > flops else "work_low", (
            f"{what}, {name}(), computes {done:,} flops of dots where its real visits need "
            f"{flops:,}: " + ("no dot on a padding step (past num_tiles), nor for an empty "
                              "group's visit." if done > flops else
                              "some real visit's dot is skipped.")),
            [("work", f"{what}: yours {done:,} · needed {flops:,}")], name=output)
    reference, minimum = moved
    bytes_moved = sum(op.bytes for op in ran.traffic.operands if op.site == site.index)
    if bytes_moved > reference:
        fail("traffic", (
            f"{what}, {name}(), moves blocks for nothing: {bytes_moved:,} bytes between HBM "
            f"and VMEM where one that fetches each real visit's blocks once moves "
            f"{reference:,}. {VJP_TRAFFIC[output]}"),
            [("bytes", f"{what}: yours {bytes_moved:,} · reference {reference:,}")], name=output)
    if bytes_moved < minimum:
        fail("traffic_low", (
            f"{what}, {name}(), moved {bytes_moved:,} bytes, fewer than the {minimum:,} its "
            "result depends on: does every input go through a BlockSpec?"),
            [("bytes", f"{what}: yours {bytes_moved:,} · minimum {minimum:,}")], name=output)
