"""The splash chapter's lesson machinery: what exercises/test_splash.py knows about
block-sparse attention beyond the right answer.

* masks the tests draw (causal, windows, random block patterns, long prompts) and the
  mask families make_mask must build, with the options that ask for each;
* the block tables as the kernels need them (categories, the compacted lists of tiles
  to visit with their padding filled ahead, the deduplicated mask blocks), worked out
  entry by entry;
* float64 attention under a mask, and a model of a kernel that follows the tables step
  by step, with the switches that make known wrong kernels of it;
* budgets of work and bytes of kernels that skip empty tiles (the K/V blocks the tables
  make a pipeline copy, the stored mask blocks) and the checks that word a learner's
  sentence from them.
"""
import contextlib
import functools
import math

import jax

from ..checking import fail, raised
from ..frozen import np
from .common import cdiv


EMPTY, PARTIAL, FULL = 0, 1, 2


# --- masks the tests draw themselves (not the learner's make_mask) -----------

def positions(T, S):
    return np.arange(T)[:, None], np.arange(S)[None, :]


def causal(T, S, *, prefix=0):
    row, col = positions(T, S)
    return (col <= row) | (col < prefix)


def window(T, S, left, right):
    row, col = positions(T, S)
    visible = np.ones((T, S), bool)
    if left is not None:
        visible &= row - col <= left
    if right is not None:
        visible &= col - row <= right
    return visible


def random_blocks(rng, T, S, block_q, block_kv, *, patterns=3, every_row_sees=True):
    """A mask drawn block by block: each block empty, full or one of a few partial
    patterns (so that patterns repeat). every_row_sees: each query sees a key.

    What the checks rely on holds whatever the seed: each row of tiles holds a full, an
    empty and a partial tile (as far as it is long), and from 4 tiles on, an odd row has
    one empty tile more than an even one, so the lists of tiles to visit differ in
    length (the shorter ones padded)."""
    pool = rng.uniform((patterns, block_q, block_kv)) < 0.5
    if every_row_sees:  # each row of a pattern sees one key at least
        pool[np.arange(patterns)[:, None], np.arange(block_q)[None, :],
             rng.integers((patterns, block_q), 0, block_kv)] = True
    pool[:, 0, 0], pool[:, -1, -1] = True, False   # partial for sure
    nq, nkv = T // block_q, S // block_kv
    kind = rng.integers((nq, nkv), -1, patterns)   # -2 empty, -1 full, else a pattern
    empty_before = None
    for i in range(nq):
        # Every kind in each row (as far as the row is long); the empty tile, order[1],
        # never where the row above had its own, nor last in row 0.
        order = [int(j) for j in rng.permutation(nkv)]
        if nkv > 1 and order[1] in (empty_before, nkv - 1 if i == 0 else None):
            order[0], order[1] = order[1], order[0]
        kind[i, order[:3]] = [-1, -2, 0][:min(3, nkv)]
        if nkv > 3 and i % 2:
            kind[i, order[3]] = -2                 # one more empty tile: a shorter list
        empty_before = order[1] if nkv > 1 else None
    kind[0, -1] = max(kind[0, -1], -1)   # row 0 ends on a tile with keys: its last step counts
    mask = np.zeros((T, S), bool)
    for i, j in np.ndindex(nq, nkv):
        block = (slice(i * block_q, (i + 1) * block_q), slice(j * block_kv, (j + 1) * block_kv))
        mask[block] = True if kind[i, j] == -1 else False if kind[i, j] == -2 \
            else pool[kind[i, j]]
    return mask


def blocks_of(mask, block_q, block_kv):
    """(index, block) for every (q block, kv block) of mask [..., T, S], row-major."""
    *lead, T, S = mask.shape
    for *head, i, j in np.ndindex(*lead, T // block_q, S // block_kv):
        yield (*head, i, j), mask[(*head, slice(i * block_q, (i + 1) * block_q),
                                   slice(j * block_kv, (j + 1) * block_kv))]


def categories_of(mask, block_q, block_kv):
    *lead, T, S = mask.shape
    categories = np.zeros((*lead, T // block_q, S // block_kv), np.int8)
    for at, block in blocks_of(mask, block_q, block_kv):
        categories[at] = FULL if block.all() else PARTIAL if block.any() else EMPTY
    return categories


# --- the tables, as the kernel needs them ------------------------------------

def ahead(values, needed):
    """Every entry not needed takes the value of the next needed entry of its table
    [R, C] (row-major, the grid's order), the last needed one's after it, 0 if none."""
    values = np.array(values)
    for table in np.ndindex(values.shape[:-2]):
        flat, keep = values[table].reshape(-1), np.asarray(needed)[table].reshape(-1)
        kept = np.flatnonzero(keep)
        for p in np.flatnonzero(~keep):
            later = kept[kept > p]
            flat[p] = flat[later[0]] if later.size else flat[kept[-1]] if kept.size else 0
        values[table] = flat.reshape(values[table].shape)
    return values


def compacted(categories):
    """(data_next, block_mask) [..., T/block_q, width] as compact() returns them."""
    *lead, nq, nkv = categories.shape
    width = max(1, int((categories != EMPTY).sum(axis=-1).max(initial=0)))
    data_next = np.zeros((*lead, nq, width), np.int32)
    block_mask = np.zeros((*lead, nq, width), np.int32)
    for row in np.ndindex(*lead, nq):
        visit = [j for j in range(nkv) if categories[row][j] != EMPTY]
        data_next[row][:len(visit)] = visit
        block_mask[row][:len(visit)] = [categories[row][j] for j in visit]
    return ahead(data_next, block_mask != EMPTY), block_mask


def deduplicated(mask, block_q, block_kv):
    """(mask_blocks [P, block_q, block_kv], block_index [..., T/block_q, S/block_kv])."""
    stored = []
    index = np.zeros(categories_of(mask, block_q, block_kv).shape, np.int32)
    for at, block in blocks_of(mask, block_q, block_kv):
        if block.any() and not block.all():
            same = [n for n, kept in enumerate(stored) if np.array_equal(kept, block)]
            if not same:
                stored.append(block)
            index[at] = same[0] if same else len(stored) - 1
    return np.stack(stored or [np.zeros((block_q, block_kv), bool)]), index


def tables_for(mask, N, block_q, block_kv, *, store="distinct"):
    """(data_next, block_mask, mask_next) [N, T/block_q, width] and the stored mask
    blocks, for a mask [T, S] or [N, T, S]. store: "distinct" (one block per partial
    pattern) or "every" (every block of the mask, in row-major order)."""
    heads = mask if mask.ndim == 3 else mask[None]
    data_next, block_mask = compacted(categories_of(heads, block_q, block_kv))
    if store == "distinct":
        mask_blocks, index = deduplicated(heads, block_q, block_kv)
    else:
        M, T, S = heads.shape
        nq, nkv = T // block_q, S // block_kv
        mask_blocks = heads.reshape(M, nq, block_q, nkv, block_kv).swapaxes(2, 3) \
            .reshape(-1, block_q, block_kv)
        index = np.arange(M * nq * nkv, dtype=np.int32).reshape(M, nq, nkv)
    mask_next = ahead(np.take_along_axis(index, data_next, axis=-1), block_mask == PARTIAL)
    tables = [np.ascontiguousarray(np.broadcast_to(t, (N, *t.shape[1:])))
              for t in (data_next, block_mask, mask_next)]
    return (*tables, mask_blocks)


# --- attention in float64 NumPy: the expected values ----------------------------

def attention(q, k, v, mask, *, sm_scale=None, head_of=None):
    """o [B, N, T, H] in float64 for mask [T, S] or [N, T, S]; a query that sees no
    key gets 0. Query head n reads K/V head head_of(n) (default n // (N // K))."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    (_, N, _, H), K = q.shape, k.shape[1]
    heads = [head_of(n) if head_of else n // (N // K) for n in range(N)]
    s = np.einsum("bnth,bnsh->bnts", q, k[:, heads])
    s *= 1 / math.sqrt(H) if sm_scale is None else sm_scale
    s = np.where(np.broadcast_to(mask, (N, *mask.shape[-2:]))[None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0))
    l = e.sum(axis=-1, keepdims=True)
    return (e @ v[:, heads]) / np.where(l == 0, 1, l)


def following(q, k, v, tables, *, sm_scale=None, kv_of=None, mask_of=None, category_of=None,
              l_rescaled=True, full_masked=False, folded=(FULL, PARTIAL), stored_at=None):
    """o in float64 of a kernel that follows tables = (data_next, block_mask, mask_next,
    mask_blocks) step by step, folding each visited block into a running max, sum and
    accumulator as online_softmax_step does (a query that sees no key gets 0). Known
    wrong kernels: kv_of(n, i, j) / mask_of(n, i, j) / category_of(n, i, j) replace the kv
    block, the stored mask block and the category a step reads (a wrong index map or
    table read); stored_at: the output stored after that step of the list, not the
    last (NaN if the list is shorter: never stored); l_rescaled=False leaves the running sum
    unconverted when the max moves (l + sum(p), not alpha * l + sum(p)); full_masked
    applies the stored block mask_next names on FULL steps too; folded: the categories
    of the steps folded (the others are skipped)."""
    data_next, block_mask, mask_next, mask_blocks = tables
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    (B, N, T, H), K = q.shape, k.shape[1]
    block_q, block_kv = mask_blocks.shape[1:]
    scale = 1 / math.sqrt(H) if sm_scale is None else sm_scale
    o = np.zeros(q.shape)
    for b, n, i in np.ndindex(B, N, T // block_q):
        rows = slice(i * block_q, (i + 1) * block_q)
        m, l, acc = np.full((block_q, 1), -np.inf), np.zeros((block_q, 1)), np.zeros((block_q, H))
        o[b, n, rows] = np.nan   # until stored
        for j in range(data_next.shape[-1]):
            if j - 1 == stored_at:
                break
            category = category_of(n, i, j) if category_of else block_mask[n, i, j]
            if category not in folded:
                continue
            kv = kv_of(n, i, j) if kv_of else data_next[n, i, j]
            cols = slice(kv * block_kv, (kv + 1) * block_kv)
            s = q[b, n, rows] @ k[b, n // (N // K), cols].T * scale
            stored = mask_blocks[mask_of(n, i, j) if mask_of else mask_next[n, i, j]]
            visible = stored if category == PARTIAL or full_masked else np.ones_like(stored)
            m_new = np.maximum(m, np.where(visible, s, -np.inf).max(axis=-1, keepdims=True))
            seen = np.isfinite(m_new)             # rows with a visible key so far
            shift = np.where(seen, m_new, 0)
            alpha = np.where(seen, np.exp(m - shift), 1)
            p = np.where(visible & seen, np.exp(s - shift), 0)
            l = (alpha * l if l_rescaled else l) + p.sum(axis=-1, keepdims=True)
            acc = alpha * acc + p @ v[b, n // (N // K), cols]
            m = m_new
        if stored_at is None or stored_at < data_next.shape[-1]:
            o[b, n, rows] = acc / np.where(l == 0, 1, l)
    return o


def inputs(rng, B, N, K, T, S, H, dtype="float32", scale=1.0, shift=0.0):
    """q [B, N, T, H], k, v [B, K, S, H]. shift: every score of a query raised by about
    `shift` (q and k share a large first coordinate). Softmax does not see it, a running
    max kept in bfloat16 does: bfloat16's spacing is 0.5 between 64 and 128."""
    q, k, v = (rng.normal((B, N, T, H), dtype, scale=scale), rng.normal((B, K, S, H), dtype),
               rng.normal((B, K, S, H), dtype))
    if shift:
        q[..., 0] = k[..., 0] = math.sqrt(shift * math.sqrt(H))
    return q, k, v


def dot_flops(steps, block_q, block_kv, H):
    """Two (block_q x H) @ (H x block_kv)-sized dots per computed block."""
    return steps * 2 * 2 * block_q * block_kv * H


def long_prompt(T, S, block_kv, shorter=0):
    """Every query sees a prompt that ends half-way through the third kv block from the
    end (`shorter` blocks earlier): full tiles, one partial tile, then empty ones (the
    queries, T <= the prompt, see nothing past it)."""
    return causal(T, S, prefix=S - (2 + shorter) * block_kv - block_kv // 2)


# The masks of the kernel puzzles' configurations, from (rng, T, S, block_q, block_kv);
# head: which head of a mask per head (the prompts differ in length from head to head).
MASKS = {"causal": lambda rng, T, S, bq, bkv, head=0: causal(T, S),
         "random": lambda rng, T, S, bq, bkv, head=0: random_blocks(rng, T, S, bq, bkv),
         "prompt": lambda rng, T, S, bq, bkv, head=0: long_prompt(T, S, bkv, 5 * head)}


# How the scores of each configuration are spread (inputs' scale and shift): wide, so
# that the running max moves; on the long configurations, near one another (many keys
# count) and shifted by about 100, where bfloat16 can only tell values 0.5 apart.
SCORES = {"causal": dict(scale=3.0), "random": dict(scale=3.0),
          "prompt": dict(scale=1.0, shift=100.0)}


FAMILIES = {   # name: (make_mask options, the mask they mean), from (T, S, rng)
    "causal": lambda T, S, rng: (dict(causal=True), causal(T, S)),
    "window": lambda T, S, rng: (lambda left, right: (
        dict(window=(left, right)), window(T, S, left, right)))(
            *(int(x) for x in rng.integers((2,), 1, 12))),
    "lookahead": lambda T, S, rng: (lambda right: (
        dict(window=(None, right)), window(T, S, None, right)))(int(rng.integers((), 0, 6))),
    "sliding": lambda T, S, rng: (lambda left: (
        dict(causal=True, window=(left, None)), causal(T, S) & window(T, S, left, None)))(
            int(rng.integers((), 2, 10))),
    "prefix": lambda T, S, rng: (lambda prefix: (
        dict(causal=True, prefix=prefix), causal(T, S, prefix=prefix)))(
            int(rng.integers((), 3, min(T, S) - 2))),
    "segments": lambda T, S, rng: (lambda q_ids, kv_ids: (
        dict(segments=(q_ids, kv_ids)), q_ids[:, None] == kv_ids[None, :]))(
            np.sort(rng.integers((T,), 0, 4)), np.sort(rng.integers((S,), 0, 4))),
    "causal documents": lambda T, S, rng: (lambda ids: (
        dict(causal=True, segments=(ids[:T], ids[:S])),
        causal(T, S) & (ids[:T, None] == ids[None, :S])))(np.sort(rng.integers((max(T, S),),
                                                                                 0, 5))),
}


def expected_with(options, T, S, causal_rule):
    """The mask make_mask(T, S, **options) means, its causal part replaced by
    causal_rule [T, S] (a known wrong answer's)."""
    visible = causal_rule.copy() if options.get("causal") else np.ones((T, S), bool)
    if options.get("window") is not None:
        visible &= window(T, S, *options["window"])
    if options.get("segments") is not None:
        q_ids, kv_ids = options["segments"]
        visible &= q_ids[:, None] == kv_ids[None, :]
    return visible


def previous_filled(data_next, padding):
    """Padding entries that repeat the entry before them (0 at a table's start)."""
    out = np.array(data_next)
    for table in np.ndindex(out.shape[:-2]):
        flat, pad = out[table].reshape(-1), padding[table].reshape(-1)
        for p in range(flat.size):
            if pad[p]:
                flat[p] = flat[p - 1] if p else 0
        out[table] = flat.reshape(out[table].shape)
    return out


def mask_budget(tables, B):
    """Mask bytes when each head fetches a stored block only for its partial steps."""
    partial = (tables[1] == PARTIAL).reshape(tables[1].shape[0], -1).sum(axis=1)
    return B * int(np.maximum(partial, 1).sum()) * int(np.prod(tables[3].shape[1:]))


def needed_kv(tables, B, K, block_kv, H, itemsize):
    """K and V bytes if every block some query needs were fetched once per kv head."""
    data_next, block_mask = tables[:2]
    N = data_next.shape[0]
    needed = {(n // (N // K), kv) for n, i, j in zip(*np.nonzero(block_mask))
              for kv in [data_next[n, i, j]]}
    return 2 * B * len(needed) * block_kv * H * itemsize


def kv_copies(tables, B, K, block_kv, H, itemsize):
    """K and V bytes that the tables make a pipeline move: a block is copied where a step's
    (batch, K/V head, kv block) differs from the step before it (padding names a block
    that is already there or needed next, so it copies nothing of its own)."""
    data_next = tables[0]
    N = data_next.shape[0]
    steps = [(b, n // (N // K), int(kv)) for b in range(B) for n in range(N)
             for kv in data_next[n].reshape(-1)]
    copies = sum(1 for before, step in zip([None] + steps, steps) if step != before)
    return 2 * copies * block_kv * H * itemsize


def check_kv_traffic(ran, k, v, budget):
    """The bytes moved for K and V, found by which input they come from (BlockSpec copies
    and DMAs of your own, wherever they sit in the call): at most `budget`."""
    moved = ran.bytes_from(k) + ran.bytes_from(v)
    if moved > budget:
        fail("kv_traffic", "your kernel fetches more K/V bytes than the visited blocks: "
             "each step of the grid should fetch the K/V block its table names, and a "
             "step with nothing to do should name a block that is already there.",
             [("K and V", f"moved: yours {moved} B · the visited blocks, each copied once "
                          f"where the tables name it {budget} B")])


def padded(n, block):
    block = min(block, cdiv(n, 8) * 8)
    return block, cdiv(n, block) * block


def columns_as_mask_next(heads, tables):
    """mask_of(n, i, j) of tables whose mask_next took block_index's first `width`
    columns (filled ahead) instead of looking block_index up at data_next."""
    block_q, block_kv = tables[3].shape[1:]
    index = deduplicated(heads, block_q, block_kv)[1]
    block_mask = tables[1][:len(heads)]
    columns = ahead(index[..., :block_mask.shape[-1]], block_mask == PARTIAL)
    return lambda n, i, j: columns[min(n, len(columns) - 1), i, j]


def check_mask_store(ran, tables):
    """The operands of your kernel that come from no input (the mask blocks, and any
    other array your function builds; prefetched tables are not among them) hold no
    more than the distinct partial patterns."""
    block_q, block_kv = tables[3].shape[1:]
    stored = ran.blocks_from(None)
    stored_bytes = sum(math.prod(b.array_shape) * np.dtype(b.dtype).itemsize for b in stored)
    distinct = len(tables[3]) * block_q * block_kv
    if stored_bytes > distinct:
        shapes = " + ".join(f"{b.array_shape} {np.dtype(b.dtype).name}" for b in stored)
        fail("mask_store", "the mask blocks your kernel reads take more memory than the "
             "distinct partial patterns: store each pattern once (dedup_blocks) and point "
             "the partial steps at it (mask_next).",
             [("stored", f"yours {shapes} = {stored_bytes} B · {len(tables[3])} distinct "
                         f"patterns = {distinct} B")])


# --- per puzzle: known wrong answers, inputs drawn, checks worded here -------

def returned_pair(yours, says):
    """Fails with `says` unless yours is a tuple of two (the tables a puzzle returns)."""
    if not (isinstance(yours, tuple) and len(yours) == 2):
        fail("returned", says, [("returned", f"{type(yours).__name__}")])
    return yours


def categories_mistakes(mask, expected, block_q, block_kv):
    """Known wrong block_categories(mask) answers, for check(..., likely=)."""
    *_, T, S = mask.shape
    nq, nkv = T // block_q, S // block_kv

    def counted(reshaped):   # categories of "blocks" cut by another reshape
        some, every = reshaped.any(axis=(-2, -1)), reshaped.all(axis=(-2, -1))
        return (some.astype(np.int8) + every).astype(np.int8)

    def rows_see():          # FULL where each row of the tile sees some key
        tiles = mask.reshape(*mask.shape[:-2], nq, block_q, nkv, block_kv)
        some, rows = tiles.any(axis=(-3, -1)), tiles.any(axis=-1).all(axis=-2)
        return (some.astype(np.int8) + rows).astype(np.int8)

    return {"codes_swapped": lambda: np.choose(expected, [EMPTY, FULL, PARTIAL])
            .astype(np.int8),
            "not_blocks": lambda: counted(mask.reshape(*mask.shape[:-2], nq, nkv,
                                                       block_q, block_kv)),
            "rows_see": rows_see,
            "any_only": lambda: (expected != EMPTY).astype(np.int8),
            "all_only": lambda: (expected == FULL).astype(np.int8)}


def skip_empty_mistakes(q, k, v, mask, block_q, block_kv, dtype):
    """Known wrong flash_block_mask(q, k, v, mask) outputs, for check(..., likely=)."""
    N, S = q.shape[1], mask.shape[-1]
    categories = categories_of(mask, block_q, block_kv)

    def blockwise(category_mask):   # each block's elements visible as its category says
        return lambda: attention(q, k, v, np.kron(category_mask, np.ones((block_q, block_kv),
                                                                          bool))).astype(dtype)

    def last_tile_only():   # the state started again at every step: only the last kv
        last = np.zeros_like(mask)                       # tile counts, 0 / 0 where it
        last[:, S - block_kv:] = mask[:, S - block_kv:]  # shows a row no key
        o = attention(q, k, v, last)
        o[..., ~last.any(axis=-1), :] = np.nan
        return o.astype(dtype)

    return {"mask_ignored": lambda: attention(q, k, v, np.ones_like(mask)).astype(dtype),
            "no_scale": lambda: attention(q, k, v, mask, sm_scale=1.0).astype(dtype),
            "partial_unmasked": blockwise(categories != EMPTY),
            "partial_skipped": blockwise(categories == FULL),
            "start_every_step": last_tile_only,   # named first when both match
            "l_not_rescaled": lambda: following(
                q, k, v, tables_for(mask, N, block_q, block_kv), l_rescaled=False)
            .astype(dtype)}


def online_step_mistakes(expected, values, sees):
    """Known wrong acc / l of online_softmax_step folded over chunks: values [keys, H]
    the chunks' v, sees [R, 1] the rows that see some key."""
    def hidden_counted():   # every hidden key of a row that sees none adds exp(0) = 1
        wrong = expected.copy()
        wrong[~sees[:, 0]] = values.mean(axis=0)
        return wrong

    return {"hidden_counted": hidden_counted}


def check_unseen_rows_empty(l, acc, sees):
    """A row that sees no key ends with l == 0 and acc == 0."""
    if (l[~sees[:, 0]] != 0).any() or (acc[~sees[:, 0]] != 0).any():
        fail("hidden_counted", "a row that sees no key must end with l == 0 and acc == 0: "
             "each hidden key adds exactly 0, p = jnp.where(visible, p, 0.0).",
             [("l", f"rows that see no key: yours {l[~sees[:, 0], 0].tolist()}")])


def families_mistakes(options, expected, T, S):
    """Known wrong make_mask(T, S, **options) answers, for check(..., likely=)."""
    row, col = positions(T, S)
    left, right = options.get("window") or (None, None)
    prefix = options.get("prefix", 0)
    likely = {}
    if options.get("causal"):
        likely["causal_strict"] = lambda: expected & (col != row)
    if options.get("segments") is not None:
        likely["segments_ignored"] = lambda: causal(T, S) if options.get("causal") \
            else np.ones_like(expected)
    if left is not None and right is not None:
        likely["window_exclusive"] = lambda: window(T, S, left - 1, right - 1)
        likely["window_sides_swapped"] = lambda: window(T, S, right, left)
        likely["window_left_exclusive"] = lambda: window(T, S, left - 1, right)
        likely["window_right_exclusive"] = lambda: window(T, S, left, right - 1)
    if left is not None and right is None:
        likely["window_exclusive"] = lambda: causal(T, S) & window(T, S, left - 1, None)
    if left is None and right is not None:
        likely["window_exclusive"] = lambda: window(T, S, None, right - 1)
    if options.get("causal") and T != S:   # the last query sees the last key
        likely["causal_bottom_right"] = lambda: expected_with(
            options, T, S, (col <= row + S - T) | (col < prefix))
    if options.get("window") and None in options["window"]:
        likely["window_none_as_zero"] = lambda: expected_with(
            dict(options, window=tuple(0 if side is None else side for side in (left, right))),
            T, S, causal(T, S, prefix=prefix))
    if prefix:
        likely["prefix_inclusive"] = lambda: causal(T, S, prefix=prefix + 1)
        likely["prefix_without_causal"] = lambda: np.broadcast_to(col < prefix, (T, S))
        likely["prefix_narrows"] = lambda: causal(T, S) & (col < prefix)
    return likely


def check_mask_rejects(make_mask, T, S, options, said):
    """make_mask(T, S, **options) raises a ValueError (said: the options, in words)."""
    try:
        make_mask(T, S, **options)
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as error:
        fail("argument_check", f"make_mask({said}) should raise a ValueError that says why; "
             "it failed with something else.",
             [("called", f"make_mask({said})"),
              ("raised", raised(error))])
    fail("argument_check", f"make_mask({said}) should raise a ValueError that says why; it "
         "returned a mask.", [("called", f"make_mask({said})"), ("raised", "nothing")])


def random_categories(rng, heads, nq, nkv, empty_rows):
    """Categories [heads, nq, nkv] (or [nq, nkv] for heads None) drawn at random, with
    `empty_rows` rows of nothing to visit (in table 0, its first row too), the tables'
    last block never the last visit, and a one-block table PARTIAL."""
    categories = rng.integers((heads or 1, nq, nkv), 0, 3, dtype="int8")
    categories[:, rng.permutation(nq)[:empty_rows]] = EMPTY
    if heads and empty_rows:
        categories[0, 0] = EMPTY   # a table that starts with nothing to visit
    categories[-1, :, -1] = EMPTY  # the tables' last block is never the last visit
    kept = [r for r in range(nq) if categories[-1, r].any()]
    if len(kept) >= 2 and nkv >= 3:   # padding after a visit to a block other than 0,
        short, long = kept[:2]        # in a row shorter than another: padding left at 0
        categories[-1, short] = EMPTY  # and padding that repeats the visit differ there
        categories[-1, short, nkv - 2] = PARTIAL
        categories[-1, long, :2] = np.maximum(categories[-1, long, :2], PARTIAL)
    if nq == nkv == 1:
        categories[...] = PARTIAL
    if not heads:
        categories = categories[0]
    return categories


@contextlib.contextmanager
def visits_fit(block_mask):
    """Around compact(categories): a row's visits that do not fit in the learner's
    tables (NumPy cannot broadcast them into a row) is the width, named."""
    try:
        yield
    except ValueError as error:   # a row's visits put into a row of the tables
        if "broadcast" not in str(error):
            raise
        fail("width_short", "a row's visits do not fit in your tables: the width is the "
             "length of the longest list, the most non-empty tiles in any one row (one q "
             "block), counted along the kv axis, visit.sum(axis=-1).max(), and at least 1.",
             [("raised", f"ValueError: {error}"),
              ("width", f"expected {block_mask.shape[-1]} (the longest row's visits)")])


def check_width(yours, block_mask):
    """compact's tables have one step at least."""
    if np.shape(yours[0])[-1:] == np.shape(yours[1])[-1:] == (0,):
        fail("width_zero", "your tables have width 0: with every tile empty the longest "
             "list is empty, but the grid's last axis needs one step at least (an axis of "
             "length 0 runs no step at all, and nothing is ever stored). width = max(1, the "
             "longest list); that one step is padding, EMPTY.",
             [("width", f"yours 0 · expected {block_mask.shape[-1]}")])


def _visits(categories):
    """The rows of categories [..., nkv] and the kv blocks each visits (non-empty)."""
    rows = list(np.ndindex(categories.shape[:-1]))
    return rows, [np.flatnonzero(categories[row] != EMPTY) for row in rows]


def block_mask_mistakes(categories, data_next, block_mask):
    """Known wrong block_mask tables of compact(categories), for check(..., likely=)."""
    rows, visits = _visits(categories)

    def first_n():   # each row's first n categories, n its number of visits
        wrong = np.array(block_mask)
        for row, kv in zip(rows, visits):
            wrong[row][:kv.size] = categories[row][:kv.size]
        return wrong

    return {"returns_swapped": lambda: data_next,
            "padding_category": lambda: ahead(block_mask, block_mask != EMPTY),
            "categories_first_n": first_n}


def data_next_mistakes(categories, data_next, block_mask):
    """Known wrong data_next tables of compact(categories), for check(..., likely=)."""
    padding = block_mask == EMPTY
    rows, visits = _visits(categories)
    raw = np.zeros_like(data_next)   # the visits at the front, padding left at 0
    for row, kv in zip(rows, visits):
        raw[row][:kv.size] = kv
    return {"padding_zero": lambda: np.where(padding, 0, data_next),
            "padding_repeats_previous": lambda: previous_filled(data_next, padding),
            "fill_ahead_full_only": lambda: ahead(raw, block_mask == FULL)}


def check_padding_entries(yours, data_next, block_mask, likely):
    """Where the visited entries of the learner's data_next are right and it is no known
    wrong answer (likely), its padding entries are named."""
    padding = block_mask == EMPTY
    mine = np.asarray(yours)
    if (mine.shape == data_next.shape and (mine[~padding] == data_next[~padding]).all()
            and not any(np.array_equal(mine, wrong()) for wrong in likely.values())):
        wrong = int((mine != data_next).sum())
        if wrong:
            fail("padding_entries", (
                "the visited entries of data_next are right; its padding entries (where "
                "block_mask is EMPTY) are not. A padding step fetches the block its entry "
                "names, so it must name the block of the next visit, the one that step "
                "will need anyway: fill_ahead(data_next, block_mask != EMPTY)."),
                [("padding", f"{wrong} of {int(padding.sum())} padding entries differ")])


def sparse_grid_mistakes(q, k, v, mask, tables, dtype):
    """Known wrong splash_call(q, k, v, *tables) outputs, for check(..., likely=)."""
    data_next, block_mask = tables[:2]
    K, T, block_q = k.shape[1], q.shape[2], tables[3].shape[1]

    def wrong(**changes):
        return lambda: following(q, k, v, tables, **changes).astype(dtype)

    return {"kv_follows_j": wrong(kv_of=lambda n, i, j: j),
            "category_head0": wrong(category_of=lambda n, i, j: block_mask[0, i, j]),
            "finish_wrong_axis": wrong(stored_at=T // block_q - 1),
            "no_scale": lambda: attention(q, k, v, mask, sm_scale=1.0).astype(dtype),
            "mask_from_kv_index": wrong(
                mask_of=lambda n, i, j: data_next[n, i, j] % len(tables[3])),
            "head_modulo": lambda: attention(q, k, v, mask,
                                             head_of=lambda n: n % K).astype(dtype),
            "l_not_rescaled": wrong(l_rescaled=False),
            "full_masked": wrong(full_masked=True)}


def dedup_mask(rng, shape, T, S, block_q, block_kv):
    """A mask [T, S] of dedup's configurations: "causal", "window" (sides drawn),
    "symmetric" (a window (8, 8)), "full", or random block patterns."""
    if shape == "causal":
        return causal(T, S)
    if shape == "window":
        return window(T, S, int(rng.integers((), 20, 40)), int(rng.integers((), 0, 20)))
    if shape == "symmetric":
        return window(T, S, 8, 8)
    if shape == "full":
        return np.ones((T, S), bool)
    return random_blocks(rng, T, S, block_q, block_kv, every_row_sees=False)


@contextlib.contextmanager
def stack_fallback(mask, block_q, block_kv):
    """Around dedup_blocks(mask, ...): np.stack of an empty list, for a mask with no
    partial tile, is the missing fallback, named."""
    categories = categories_of(mask, block_q, block_kv)
    partial = int((categories == PARTIAL).sum())
    try:
        yield
    except ValueError as error:
        if partial or "at least one array" not in str(error):
            raise
        fail("no_fallback", "with no partial tile your list of stored patterns is empty, "
             "and np.stack has nothing to stack: store one all-False block then, "
             "np.zeros((block_q, block_kv), bool) (a kernel operand cannot be empty; no "
             "step reads it).", [("mask", "no partial tile"),
                                 ("raised", f"ValueError: {error}")])


def check_stored_blocks(blocks, block_index, mask, block_q, block_kv):
    """The learner's (mask_blocks, block_index) of dedup_blocks(mask, ...): the stored
    blocks are tiles of the mask, different patterns are not merged, each distinct
    partial pattern is stored once and no full block is stored."""
    S = mask.shape[-1]
    stored, index = deduplicated(mask, block_q, block_kv)
    categories = categories_of(mask, block_q, block_kv)
    partial, full = int((categories == PARTIAL).sum()), int((categories == FULL).sum())
    count = ("stored", f"blocks: yours {len(blocks)} · distinct partial patterns "
                       f"{len(stored) if partial else 0} · partial blocks {partial} · full "
                       f"{full}")
    tiles = {at: tile for at, tile in blocks_of(mask, block_q, block_kv)
             if categories[at] == PARTIAL}
    known = {tile.tobytes() for tile in tiles.values()}
    strangers = [n for n, block in enumerate(blocks) if blocks.shape[1:] == (block_q, block_kv)
                 and block.astype(bool).tobytes() not in known and not block.all()]
    rows = blocks.ndim == 3 and blocks.shape[1:] == (S // block_kv, block_kv) != (block_q,
                                                                                 block_kv)
    if partial and (strangers or rows):
        fail("not_tiles", (
            (f"your stored blocks are {blocks.shape[1:]}: one row of the mask cut into its "
             f"kv blocks, not a ({block_q}, {block_kv}) tile" if rows else
             f"your stored block {strangers[0]} is no tile of the mask") + ": they are cut "
            "the wrong way. After mask.reshape(..., T/block_q, block_q, S/block_kv, "
            "block_kv), blocks[..., i, j] is not tile (i, j) yet but row j of q block i: "
            "swap axes -3 and -2 first, blocks.swapaxes(-3, -2), so that the two tile "
            "indices come before the two axes inside a tile."),
            [count, ("blocks", f"yours {blocks.shape} · expected {stored.shape}")])
    if partial and len(blocks) < len(stored) and block_index.shape == categories.shape:
        first = {}   # your stored place -> the first tile that names it
        for at, tile in tiles.items():
            place = int(block_index[at])
            if place in first and not np.array_equal(tiles[first[place]], tile):
                fail("merged", (
                    f"two different partial patterns share one stored block: tiles "
                    f"{first[place]} and {at} differ, yet your block_index gives both "
                    f"{place}. Whatever finds a pattern again (a dict's key) must tell every "
                    "pattern apart: the pattern itself, all its bits (pattern.tobytes()), "
                    "not a summary of it such as its count of visible keys."), [count])
            first.setdefault(place, at)
    if len(blocks) != len(stored) and partial:
        if len(blocks) == partial != len(stored):
            fail("not_deduplicated", "you stored every partial block, one per (q block, "
                 "kv block): store each distinct pattern once.", [count])
        if len(blocks) in (partial + full, len(stored) + 1):
            fail("full_stored", "you stored a full block too: only partial blocks need "
                 "their mask.", [count])


def mask_blocks_mistakes(stored):
    """Known wrong mask_blocks of dedup_blocks, for check(..., likely=)."""
    return {"sorted_patterns": lambda: np.unique(
        stored.reshape(len(stored), -1), axis=0).reshape(stored.shape)}


def block_index_mistakes(categories, index):
    """Known wrong block_index tables of dedup_blocks (on the partial tiles), for
    check(..., likely=)."""
    return {"index_one_based": lambda: np.where(categories == PARTIAL, index + 1, 0),
            "index_per_tile": lambda: np.where(
                categories == PARTIAL, np.cumsum(categories == PARTIAL).reshape(
                    categories.shape) - 1, 0)}


def multihead_mask(rng, shape, T, S, *, sliding):
    """A mask of multihead's configurations: "per head" (four heads: a window, a prompt,
    causal with a query that sees no key, and segments where half the queries see none),
    "sliding" (causal, `sliding` keys back), "hidden" (no key visible) or random (the
    first query sees no key)."""
    if shape == "per head":
        ids = np.sort(rng.integers((S,), 0, 3))
        q_ids = np.where(np.arange(T) < T // 2, ids[:T], 3)   # segment 3: no key
        mask = np.stack([window(T, S, 40, 250),                # 3 kv blocks per q block
                         causal(T, S, prefix=200),             # 2, a full tile at (0, 0)
                         causal(T, S),                         # 1
                         q_ids[:, None] == ids[None, :]])
        mask[2, 5] = False                                     # a query that sees no key
    elif shape == "sliding":
        mask = causal(T, S) & window(T, S, sliding, None)
    elif shape == "hidden":
        mask = np.zeros((T, S), bool)
    else:
        mask = rng.uniform((T, S)) < 0.6
        mask[0] = False
    return mask


def multihead_mistakes(q, k, v, mask, heads, tables, dtype):
    """Known wrong splash_attention(q, k, v, mask) outputs, for check(..., likely=):
    heads [1 or N, T_padded, S_padded] the mask per head padded to whole blocks, tables
    those worked out from it."""
    (B, N, T, _), (K, S) = q.shape, k.shape[1:3]
    T_padded, S_padded = heads.shape[1:]
    block_q, block_kv = tables[3].shape[1:]
    pad = ((0, 0), (0, 0), (0, S_padded - S), (0, 0))

    def masked_row_mean():  # hidden keys of a visited block count exp(0) = 1 each
        o = attention(q, k, v, mask)
        v_padded = np.pad(np.asarray(v, np.float64), pad)
        categories = categories_of(heads, block_q, block_kv)
        for b, n, t in zip(*np.nonzero(~np.broadcast_to(mask, (B, N, T, S)).any(axis=-1))):
            seen = np.kron(categories[min(n, len(heads) - 1), t // block_q] != EMPTY,
                           np.ones(block_kv, bool))
            if seen.any():
                o[b, n, t] = v_padded[b, n // (N // K), seen].mean(axis=0)
        return o.astype(dtype)

    def padding_seen():  # zero keys past S visible to every query
        wide = np.pad(np.broadcast_to(mask, (N, T, S)), ((0, 0), (0, 0), (0, S_padded - S)),
                      constant_values=True)
        return attention(q, np.pad(k, pad), np.pad(v, pad), wide).astype(dtype)

    def wrong(**changes):   # a kernel that follows the tables, wrong as `changes` say
        q_padded = np.pad(q, ((0, 0), (0, 0), (0, T_padded - T), (0, 0)))
        return lambda: following(q_padded, np.pad(k, pad), np.pad(v, pad), tables,
                                 **changes)[:, :, :T].astype(dtype)

    def no_key_rows_nan():  # right, but a row that sees no key divides 0 by 0
        blind = ~np.broadcast_to(mask, (N, T, S)).any(axis=-1)[None, :, :, None]
        return np.where(blind, np.nan, attention(q, k, v, mask)).astype(dtype)

    return {"head_modulo": lambda: attention(q, k, v, mask,
                                             head_of=lambda n: n % K).astype(dtype),
            "no_key_rows_nan": no_key_rows_nan,
            "first_head_mask": lambda: attention(q, k, v, heads[0, :T, :S])
            .astype(dtype),
            "masked_row_mean": masked_row_mean,
            "padding_seen": padding_seen,
            "full_skipped": wrong(folded=(PARTIAL,)),
            "mask_next_not_looked_up": lambda: wrong(
                mask_of=columns_as_mask_next(heads, tables))(),
            "l_not_rescaled": wrong(l_rescaled=False)}


def check_attention_rejects(splash_attention, said, q, k, v, **static):
    """splash_attention(q, k, v, **static) raises a ValueError before any kernel is
    built (said: the bad argument, in words)."""
    try:
        jax.eval_shape(functools.partial(splash_attention, **static), q, k, v)
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as error:
        fail("argument_check", f"splash_attention({said}) should raise a ValueError that "
             "names the argument before any kernel is built; it failed later, inside JAX.",
             [("called", f"splash_attention({said})"),
              ("raised", raised(error))])
    fail("argument_check", f"splash_attention({said}) should raise a ValueError that names "
         "the argument; it raised nothing.",
         [("called", f"splash_attention({said})"), ("raised", "nothing")])


# --- the mask, applied where a tile is partial only --------------------------------

def check_full_tiles_unmasked(ran, categories):
    """A full tile (every key visible) is folded without the mask: its mask block is not
    even read. The walk of the kernel says at which grid steps (b, n, i, kv) the mask
    operand (the one built from no argument) was loaded."""
    from ..structure import operands_of

    masks = {id(block) for block in operands_of(ran.program, "constants")}
    for site, counts in zip(ran.program.sites, ran.counts):
        operands = {site.call.num_prefetch + k for k, block in enumerate(site.call.blocks)
                    if id(block) in masks}
        full = sorted(point for point, operand in counts.loads
                      if operand in operands and len(point) == 4
                      and categories[point[2], point[3]] == FULL)
        if full:
            i, kv = full[0][2:]
            fail("full_tile_masked", (
                "your kernel reads the mask on full tiles too: a full tile has every key "
                "visible, and the lesson is that only partial tiles pay for the mask. Fold "
                "a full tile with no mask (@pl.when(category == FULL): visible=None), and "
                "read mask_ref under @pl.when(category == PARTIAL) only."),
                [("tiles", f"{len(full)} grid steps on full tiles read the mask, the first "
                           f"at q block {i}, kv block {kv}")])
