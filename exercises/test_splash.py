"""Tests for exercises/splash.py. Run them, don't edit them:

    pytest exercises/test_splash.py                   # all puzzles of the chapter
    pytest exercises/test_splash.py -k skip_empty     # one puzzle
    pytest exercises/test_splash.py -k skip_empty --hint

The table puzzles (categories, families, compact, dedup) compare your NumPy with
the tables the kernel needs, entry by entry. The kernel puzzles compare your
output with masked attention computed in float64 NumPy (a query that sees no key
gets 0), on at least two shapes; count the dot work your kernel executed (only
blocks with a visible key may be computed) and, where the lesson is data
movement, the bytes it moved between HBM and VMEM; then check that the kernel
would compile for a real TPU. Tests marked `tpu` run realistic sizes on a real
TPU and are skipped elsewhere.

Each bfloat16 kernel puzzle has a long configuration (16 kv steps) whose scores all
sit near 100 (a shift softmax does not see): a running max kept in bfloat16 gets the
values visibly wrong there. Any state your kernel carries from step to step in a float
narrower than 32 bits (m, l, acc) is named from the program itself, before it runs.

Masks are NumPy booleans, handed to your functions as they are (never traced):
everything about them is known before the kernel is built. The masks here are
made by the tests themselves, not by your make_mask.
"""
import functools

import jax
import numpy as np
import pytest

from pytest_pallas_hints import (Structure, chapter, check, check_traffic, check_work, fail,
                                 lowers_for_tpu, measure, tpu_sized)
from pytest_pallas_hints.lessons.splash import (
    EMPTY, FULL, MASKS, PARTIAL, SCORES, FAMILIES, ahead, attention, blocks_of, categories_of,
    causal, check_kv_traffic, check_mask_store, columns_as_mask_next, compacted, deduplicated,
    dot_flops, expected_with, following, inputs, kv_copies, mask_budget, needed_kv, padded,
    positions, previous_filled, random_blocks, tables_for, window)

splash = chapter("splash")

puzzle = pytest.mark.puzzle
on_tpu = pytest.mark.tpu


# What each kernel lesson requires of your program, checked from its trace: your own
# kernel computes the scores and the softmax, and reads a scalar-prefetched table.
ATTENTION = Structure(inside={"dot_general", "exp"}, prefetch=True)


# 1 -------------------------------------------------------------------------
@puzzle("splash.categories")
@pytest.mark.parametrize("heads, T, S, block_q, block_kv", [
    pytest.param(None, 64, 96, 16, 32, id="T=64 S=96 block_q=16 block_kv=32"),
    pytest.param(3, 48, 48, 16, 8, id="N=3 T=S=48 block_q=16 block_kv=8 (a mask per head)"),
    pytest.param(None, 8, 8, 8, 8, id="T=S=8 (one block)"),
    pytest.param(8, 8192, 8192, 512, 512, id="N=8 T=S=8192-tpu", marks=on_tpu),
])
def test_categories(heads, T, S, block_q, block_kv, rng):
    masks = [random_blocks(rng, T, S, block_q, block_kv, every_row_sees=False)
             for _ in range(heads or 1)]
    mask = np.stack(masks) if heads else masks[0]
    yours = splash.block_categories(mask, block_q, block_kv)
    expected = categories_of(mask, block_q, block_kv)
    nq, nkv = T // block_q, S // block_kv

    def counted(reshaped):   # categories of "blocks" cut by another reshape
        some, every = reshaped.any(axis=(-2, -1)), reshaped.all(axis=(-2, -1))
        return (some.astype(np.int8) + every).astype(np.int8)

    def rows_see():          # FULL where each row of the tile sees some key
        tiles = mask.reshape(*mask.shape[:-2], nq, block_q, nkv, block_kv)
        some, rows = tiles.any(axis=(-3, -1)), tiles.any(axis=-1).all(axis=-2)
        return (some.astype(np.int8) + rows).astype(np.int8)

    check(yours, expected, blocks=(1,) * expected.ndim,
          axes=" ".join(["N"] * (expected.ndim - 2) + ["i", "j"]),
          likely={"codes_swapped": lambda: np.choose(expected, [EMPTY, FULL, PARTIAL])
                  .astype(np.int8),
                  "not_blocks": lambda: counted(mask.reshape(*mask.shape[:-2], nq, nkv,
                                                             block_q, block_kv)),
                  "rows_see": rows_see,
                  "any_only": lambda: (expected != EMPTY).astype(np.int8),
                  "all_only": lambda: (expected == FULL).astype(np.int8)})


# 2 -------------------------------------------------------------------------
def block_structure(B, N, T, S, H, block_q, block_kv):
    return ATTENTION.where(grid=(B, N, T // block_q, S // block_kv),
                           blocks={"q": (None, None, block_q, H), "k": (None, None, block_kv, H),
                                   "constants": (block_q, block_kv)})


@puzzle("splash.skip_empty")
@pytest.mark.parametrize("B, N, T, S, H, block_q, block_kv, shape, dtype", [
    pytest.param(1, 2, 128, 384, 64, 64, 128, "random", "float32",
                 id="B=1 N=2 T=128 S=384 H=64 block_q=64 block_kv=128 random blocks"),
    pytest.param(2, 1, 64, 2048, 128, 64, 128, "prompt", "bfloat16",
                 id="B=2 N=1 T=64 S=2048 H=128 bf16 a long prompt (16 kv steps, the last "
                    "two empty), scores shifted by 100"),
    pytest.param(2, 8, 4096, 4096, 128, 512, 512, "causal", "bfloat16",
                 id="B=2 N=8 T=S=4096 bf16 keys j<=i-tpu", marks=on_tpu),
])
def test_skip_empty(B, N, T, S, H, block_q, block_kv, shape, dtype, rng):
    """Right values; and the work of the non-empty blocks only (an empty block's dots
    are skipped). Scores spread wide (q scaled by 3) so the running max moves; on the
    long prompt, every score of a query shifted by about 100 (softmax does not see it;
    a running max kept in bfloat16 does)."""
    q, k, v = inputs(rng, B, N, N, T, S, H, dtype, **SCORES[shape])
    mask = MASKS[shape](rng, T, S, block_q, block_kv)
    ran = measure(splash.flash_block_mask, q, k, v, mask=mask, block_q=block_q,
                  block_kv=block_kv, structure=block_structure(B, N, T, S, H, block_q, block_kv))
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

    check(ran, attention(q, k, v, mask).astype(dtype), blocks=(1, 1, block_q, None),
          axes="B N T H", tolerance=1e-4 if dtype == "float32" else None,
          likely={"mask_ignored": lambda: attention(q, k, v, np.ones_like(mask)).astype(dtype),
                  "no_scale": lambda: attention(q, k, v, mask, sm_scale=1.0).astype(dtype),
                  "partial_unmasked": blockwise(categories != EMPTY),
                  "partial_skipped": blockwise(categories == FULL),
                  "start_every_step": last_tile_only,   # named first when both match
                  "l_not_rescaled": lambda: following(
                      q, k, v, tables_for(mask, N, block_q, block_kv), l_rescaled=False)
                  .astype(dtype)})
    if tpu_sized():
        return
    visited = int((categories != EMPTY).sum())
    check_work(ran, flops=B * N * dot_flops(visited, block_q, block_kv, H),
               likely={"every_block": B * N * dot_flops(categories.size, block_q, block_kv, H)})
    lowers_for_tpu(ran)


@puzzle("splash.skip_empty")
@pytest.mark.parametrize("chunks", [
    pytest.param("partial", id="online_softmax_step: 3 chunks under a mask, rows that see no "
                               "key (in one chunk, in every chunk)"),
    pytest.param("full", id="online_softmax_step: a chunk with no mask (visible=None) between "
                            "two masked ones"),
])
def test_skip_empty_online_softmax_step(chunks, rng):
    """online_softmax_step alone, chunk by chunk, from the running state a kernel starts
    with (m = -inf, l = 0, acc = 0): acc / l is the softmax-weighted mean of v over the
    visible keys, and a row that sees no key in any chunk ends with l == 0 and acc == 0."""
    import jax.numpy as jnp

    R, C, H = 16, 32, 8
    s = rng.normal((3, R, C), scale=3.0)
    v = rng.normal((3, C, H))
    visible = rng.uniform((3, R, C)) < 0.5
    visible[:, :, 0] = True          # every row sees a key in every chunk, but:
    if chunks == "partial":
        visible[:, :4] = False       # rows 0-3 see no key at all
        visible[0, 4:8] = False      # rows 4-7 none in the first chunk
    else:
        visible[1] = True            # the middle chunk is folded with visible=None
    m, l, acc = jnp.full((R, 1), -jnp.inf), jnp.zeros((R, 1)), jnp.zeros((R, H))
    for c in range(3):
        given = None if chunks == "full" and c == 1 else jnp.asarray(visible[c])
        m, l, acc = splash.online_softmax_step(m, l, acc, jnp.asarray(s[c]), jnp.asarray(v[c]),
                                               given)
    l, acc = np.asarray(l, np.float64), np.asarray(acc, np.float64)
    seen = np.concatenate(list(visible), axis=-1)                  # [R, 3C]
    scores = np.where(seen, np.concatenate(list(s), axis=-1), -np.inf)
    values = np.concatenate(list(v), axis=0).astype(np.float64)    # [3C, H]
    sees = seen.any(axis=-1, keepdims=True)
    p = np.where(seen, np.exp(scores - np.where(sees, scores.max(axis=-1, keepdims=True), 0)), 0)
    expected = (p @ values) / np.where(sees, p.sum(axis=-1, keepdims=True), 1)

    def hidden_counted():   # every hidden key of a row that sees none adds exp(0) = 1
        wrong = expected.copy()
        wrong[~sees[:, 0]] = values.mean(axis=0)
        return wrong

    check(acc / np.where(l == 0, 1, l), expected, name="acc / l", blocks=(4, None),
          axes="R H", tolerance=1e-4, likely={"hidden_counted": hidden_counted})
    if (l[~sees[:, 0]] != 0).any() or (acc[~sees[:, 0]] != 0).any():
        fail("hidden_counted", "a row that sees no key must end with l == 0 and acc == 0: "
             "each hidden key adds exactly 0, p = jnp.where(visible, p, 0.0).",
             [("l", f"rows that see no key: yours {l[~sees[:, 0], 0].tolist()}")])


# 3 -------------------------------------------------------------------------


@puzzle("splash.families")
@pytest.mark.parametrize("T, S", [
    pytest.param(24, 40, id="T=24 S=40"),
    pytest.param(33, 17, id="T=33 S=17 (more queries than keys)"),
    pytest.param(8192, 8192, id="T=S=8192-tpu", marks=on_tpu),
])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_families(family, T, S, rng):
    options, expected = FAMILIES[family](T, S, rng)
    yours = splash.make_mask(T, S, **options)
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
    check(yours, expected, blocks=(8, 8), axes="T S", likely=likely)


@puzzle("splash.families")
@pytest.mark.parametrize("bad", [
    pytest.param("prefix", id="prefix=4 without causal"),
    pytest.param("segments", id="segment ids of the wrong length"),
])
def test_families_check_their_arguments(bad):
    """A mask that cannot mean what was asked fails with a ValueError, not a guess."""
    T, S = 24, 40
    options, said = ((dict(prefix=4), "prefix=4 without causal=True") if bad == "prefix"
                     else (dict(segments=(np.zeros(T, np.int32), np.zeros(S + 1, np.int32))),
                           f"segments of lengths {T} and {S + 1} for T={T}, S={S}"))
    try:
        splash.make_mask(T, S, **options)
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as error:
        fail("argument_check", f"make_mask({said}) should raise a ValueError that says why; "
             "it failed with something else.",
             [("called", f"make_mask({said})"),
              ("raised", f"{type(error).__name__}: {str(error).splitlines()[0][:200]}")])
    fail("argument_check", f"make_mask({said}) should raise a ValueError that says why; it "
         "returned a mask.", [("called", f"make_mask({said})"), ("raised", "nothing")])


# 4 -------------------------------------------------------------------------
@puzzle("splash.compact")
@pytest.mark.parametrize("heads, nq, nkv, empty_rows", [
    pytest.param(None, 6, 5, 1, id="6 q blocks x 5 kv blocks, an empty row"),
    pytest.param(3, 4, 7, 2, id="3 tables of 4 x 7, empty rows (one at the start)"),
    pytest.param(None, 1, 1, 0, id="one block"),
    pytest.param(None, 3, 4, 3, id="3 x 4, every tile empty (one step of padding)"),
    pytest.param(16, 64, 64, 4, id="16 tables of 64 x 64-tpu", marks=on_tpu),
])
def test_compact(heads, nq, nkv, empty_rows, rng):
    categories = rng.integers((heads or 1, nq, nkv), 0, 3, dtype="int8")
    categories[:, rng.permutation(nq)[:empty_rows]] = EMPTY
    if heads and empty_rows:
        categories[0, 0] = EMPTY   # a table that starts with nothing to visit
    categories[-1, :, -1] = EMPTY  # the tables' last block is never the last visit
    if nq == nkv == 1:
        categories[...] = PARTIAL
    if not heads:
        categories = categories[0]
    data_next, block_mask = compacted(categories)
    try:
        yours = splash.compact(categories)
    except ValueError as error:   # a row's visits put into a row of the tables
        if "broadcast" not in str(error):
            raise
        fail("width_short", "a row's visits do not fit in your tables: the width is the "
             "length of the longest list, the most non-empty tiles in any one row (one q "
             "block), counted along the kv axis, visit.sum(axis=-1).max(), and at least 1.",
             [("raised", f"ValueError: {error}"),
              ("width", f"expected {block_mask.shape[-1]} (the longest row's visits)")])
    if not (isinstance(yours, tuple) and len(yours) == 2):
        fail("returned", "compact returns a tuple of two arrays, (data_next, block_mask).",
             [("returned", f"{type(yours).__name__}")])
    padding = block_mask == EMPTY
    lead = " ".join(["N"] * (categories.ndim - 2))
    if np.shape(yours[0])[-1:] == np.shape(yours[1])[-1:] == (0,):
        fail("width_zero", "your tables have width 0: with every tile empty the longest "
             "list is empty, but the grid's last axis needs one step at least (an axis of "
             "length 0 runs no step at all, and nothing is ever stored). width = max(1, the "
             "longest list); that one step is padding, EMPTY.",
             [("width", f"yours 0 · expected {block_mask.shape[-1]}")])
    rows = list(np.ndindex(categories.shape[:-1]))
    visits = [np.flatnonzero(categories[row] != EMPTY) for row in rows]

    def first_n():   # each row's first n categories, n its number of visits
        wrong = np.array(block_mask)
        for row, kv in zip(rows, visits):
            wrong[row][:kv.size] = categories[row][:kv.size]
        return wrong

    check(yours[1], block_mask, name="block_mask", axes=f"{lead} i j".strip(),
          blocks=(1,) * block_mask.ndim,
          likely={"returns_swapped": lambda: data_next,
                  "padding_category": lambda: ahead(block_mask, block_mask != EMPTY),
                  "categories_first_n": first_n})
    raw = np.zeros_like(data_next)   # the visits at the front, padding left at 0
    for row, kv in zip(rows, visits):
        raw[row][:kv.size] = kv
    likely = {"padding_zero": lambda: np.where(padding, 0, data_next),
              "padding_repeats_previous": lambda: previous_filled(data_next, padding),
              "fill_ahead_full_only": lambda: ahead(raw, block_mask == FULL)}
    mine = np.asarray(yours[0])
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
    check(yours[0], data_next, name="data_next", axes=f"{lead} i j".strip(),
          blocks=(1,) * block_mask.ndim, likely=likely)


# 5 -------------------------------------------------------------------------


def sparse_structure(B, N, T, H, tables):
    block_q, block_kv = tables[3].shape[1:]
    return ATTENTION.where(grid=(B, N, T // block_q, tables[0].shape[-1]),
                           blocks={"q": (None, None, block_q, H), "k": (None, None, block_kv, H),
                                   "mask_blocks": (None, block_q, block_kv)})


@puzzle("splash.sparse_grid")
@pytest.mark.parametrize("B, N, K, T, S, H, block_q, block_kv, shape, store, dtype", [
    pytest.param(1, 4, 2, 128, 512, 64, 64, 128, "random", "every", "float32",
                 id="B=1 N=4 K=2 T=128 S=512 H=64 block_q=64 a mask per head"),
    pytest.param(1, 1, 1, 128, 384, 128, 128, 128, "causal", "distinct", "bfloat16",
                 id="N=K=1 T=128 S=384 H=128 bf16 keys j<=i (one q block, one visit)"),
    pytest.param(1, 2, 1, 64, 2048, 128, 64, 128, "prompt", "distinct", "bfloat16",
                 id="B=1 N=2 K=1 T=64 S=2048 H=128 bf16 long prompts (14 and 9 visits), "
                    "scores shifted by 100"),
    pytest.param(2, 8, 2, 4096, 4096, 128, 512, 512, "causal", "distinct", "bfloat16",
                 id="B=2 N=8 K=2 T=S=4096 bf16 keys j<=i-tpu", marks=on_tpu),
])
def test_sparse_grid(B, N, K, T, S, H, block_q, block_kv, shape, store, dtype, rng):
    """splash_call on tables made here: right values, the work of the visited steps
    only, and K/V bytes of the visited blocks, each copied once where the tables name
    it. The masks are one per head (but the causal one): their lists differ in length,
    so the shorter ones end in padding steps."""
    q, k, v = inputs(rng, B, N, K, T, S, H, dtype, **SCORES[shape])
    if shape == "causal":
        mask = causal(T, S)
    else:
        mask = np.stack([MASKS[shape](rng, T, S, block_q, block_kv, head=n) for n in range(N)])
    tables = tables_for(mask, N, block_q, block_kv, store=store)
    ran = measure(splash.splash_call, q, k, v, *tables, structure=sparse_structure(
        B, N, T, H, tables))
    data_next, block_mask, mask_next, _ = tables

    def wrong(**changes):
        return lambda: following(q, k, v, tables, **changes).astype(dtype)

    check(ran, attention(q, k, v, mask).astype(dtype), blocks=(1, 1, block_q, None),
          axes="B N T H", tolerance=1e-4 if dtype == "float32" else None,
          likely={"kv_follows_j": wrong(kv_of=lambda n, i, j: j),
                  "category_head0": wrong(category_of=lambda n, i, j: block_mask[0, i, j]),
                  "finish_wrong_axis": wrong(stored_at=T // block_q - 1),
                  "no_scale": lambda: attention(q, k, v, mask, sm_scale=1.0).astype(dtype),
                  "mask_from_kv_index": wrong(
                      mask_of=lambda n, i, j: data_next[n, i, j] % len(tables[3])),
                  "head_modulo": lambda: attention(q, k, v, mask,
                                                   head_of=lambda n: n % K).astype(dtype),
                  "l_not_rescaled": wrong(l_rescaled=False),
                  "full_masked": wrong(full_masked=True)})
    if tpu_sized():
        return
    steps = B * int((block_mask != EMPTY).sum())
    check_work(ran, flops=dot_flops(steps, block_q, block_kv, H),
               likely={"padding_steps": dot_flops(B * block_mask.size, block_q, block_kv, H)})
    itemsize = q.dtype.itemsize
    kv = kv_copies(tables, B, K, block_kv, H, itemsize)
    check_kv_traffic(ran, k, v, kv)
    check_traffic(ran, reference=2 * q.nbytes + kv + mask_budget(tables, B),
                  minimum=2 * q.nbytes + needed_kv(tables, B, K, block_kv, H, itemsize))
    lowers_for_tpu(ran)


# 6 -------------------------------------------------------------------------
@puzzle("splash.dedup")
@pytest.mark.parametrize("heads, T, S, block_q, block_kv, shape", [
    pytest.param(None, 128, 128, 32, 32, "causal", id="T=S=128 block_q=block_kv=32 keys j<=i"),
    pytest.param(2, 96, 160, 32, 32, "random", id="N=2 T=96 S=160 random blocks"),
    pytest.param(None, 64, 128, 16, 32, "window", id="T=64 S=128 block_q=16 block_kv=32 window"),
    pytest.param(None, 64, 64, 16, 16, "symmetric",
                 id="T=S=64 blocks 16 window (8, 8): tiles that mirror each other across "
                    "the diagonal (as many visible keys, other patterns)"),
    pytest.param(None, 32, 64, 32, 32, "full", id="T=32 S=64 nothing partial"),
    pytest.param(8, 8192, 8192, 512, 512, "window", id="N=8 T=S=8192 window-tpu", marks=on_tpu),
])
def test_dedup(heads, T, S, block_q, block_kv, shape, rng):
    def one():
        if shape == "causal":
            return causal(T, S)
        if shape == "window":
            return window(T, S, int(rng.integers((), 20, 40)), int(rng.integers((), 0, 20)))
        if shape == "symmetric":
            return window(T, S, 8, 8)
        if shape == "full":
            return np.ones((T, S), bool)
        return random_blocks(rng, T, S, block_q, block_kv, every_row_sees=False)

    mask = np.stack([one() for _ in range(heads)]) if heads else one()
    stored, index = deduplicated(mask, block_q, block_kv)
    categories = categories_of(mask, block_q, block_kv)
    partial, full = int((categories == PARTIAL).sum()), int((categories == FULL).sum())
    try:
        yours = splash.dedup_blocks(mask, block_q, block_kv)
    except ValueError as error:
        if partial or "at least one array" not in str(error):
            raise
        fail("no_fallback", "with no partial tile your list of stored patterns is empty, "
             "and np.stack has nothing to stack: store one all-False block then, "
             "np.zeros((block_q, block_kv), bool) (a kernel operand cannot be empty; no "
             "step reads it).", [("mask", "no partial tile"),
                                 ("raised", f"ValueError: {error}")])
    if not (isinstance(yours, tuple) and len(yours) == 2):
        fail("returned", "dedup_blocks returns a tuple of two arrays, (mask_blocks, "
             "block_index).", [("returned", f"{type(yours).__name__}")])
    blocks, block_index = (np.asarray(x) for x in yours)
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
    check(blocks, stored, name="mask_blocks", blocks=(1, None, None), axes="P bq bkv",
          likely={"sorted_patterns": lambda: np.unique(
              stored.reshape(len(stored), -1), axis=0).reshape(stored.shape)})
    lead = " ".join(["N"] * (categories.ndim - 2))
    check(np.where(categories == PARTIAL, block_index, 0), index, name="block_index",
          blocks=(1,) * index.ndim, axes=f"{lead} i j".strip(),
          likely={"index_one_based": lambda: np.where(categories == PARTIAL, index + 1, 0),
                  "index_per_tile": lambda: np.where(
                      categories == PARTIAL, np.cumsum(categories == PARTIAL).reshape(
                          categories.shape) - 1, 0)})


# 7 -------------------------------------------------------------------------


@puzzle("splash.multihead")
@pytest.mark.parametrize("B, N, K, T, S, H, block_q, block_kv, shape, dtype", [
    pytest.param(1, 1, 1, 5, 7, 8, 128, 128, "random", "float32",
                 id="T=5 S=7 H=8 blocks of 128 asked (they shrink to 8)"),
    pytest.param(1, 1, 1, 16, 24, 8, 8, 8, "hidden", "float32",
                 id="T=16 S=24 H=8 every key hidden (o = 0, one step of padding)"),
    pytest.param(1, 4, 2, 100, 300, 64, 64, 128, "per head", "float32",
                 id="B=1 N=4 K=2 T=100 S=300 H=64 block_q=64 a mask per head"),
    pytest.param(1, 2, 1, 256, 256, 32, 32, 32, "sliding", "float32",
                 id="B=1 N=2 K=1 T=S=256 H=32 blocks of 32 a sliding window of 40 keys "
                    "(the visits of q block i start at kv block i - 2)"),
    pytest.param(2, 2, 1, 64, 2000, 128, 64, 128, "long", "bfloat16",
                 id="B=2 N=2 K=1 T=64 S=2000 H=128 bf16 one mask (16 kv steps), scores "
                    "shifted by 100"),
    pytest.param(2, 8, 2, 4096, 4096, 128, 512, 512, "sliding", "bfloat16",
                 id="B=2 N=8 K=2 T=S=4096 bf16 sliding window-tpu", marks=on_tpu),
])
def test_multihead(B, N, K, T, S, H, block_q, block_kv, shape, dtype, rng):
    """splash_attention: right values (0 for a query that sees no key); the work of the
    non-empty blocks only; K/V bytes of those blocks, each copied once where the tables
    name it; the mask stored once per distinct partial pattern.

    The masks per head hold, whatever the seed, a full tile, lists of different lengths
    (padding steps), a query that sees no key and tiles that hang off T and S. The
    sliding window's lists start past kv block 0 (a partial step's stored block must be
    looked up at the kv block it visits); the short configuration asks for blocks of 128
    (splash_attention shrinks them before padding); a mask with every key hidden still
    has one (padding) step."""
    q, k, v = inputs(rng, B, N, K, T, S, H, dtype,
                     **(dict(scale=1.0, shift=100.0) if shape == "long" else dict(scale=3.0)))
    if shape == "per head":
        ids = np.sort(rng.integers((S,), 0, 3))
        q_ids = np.where(np.arange(T) < T // 2, ids[:T], 3)   # segment 3: no key
        mask = np.stack([window(T, S, 40, 250),                # 3 kv blocks per q block
                         causal(T, S, prefix=200),             # 2, a full tile at (0, 0)
                         causal(T, S),                         # 1
                         q_ids[:, None] == ids[None, :]])
        mask[2, 5] = False                                     # a query that sees no key
    elif shape == "sliding":
        mask = causal(T, S) & window(T, S, 1024 if tpu_sized() else 40, None)
    elif shape == "hidden":
        mask = np.zeros((T, S), bool)
    else:
        mask = rng.uniform((T, S)) < 0.6
        mask[0] = False
    asked = dict(block_q=block_q, block_kv=block_kv)   # splash_attention shrinks them
    block_q, T_padded = padded(T, block_q)
    block_kv, S_padded = padded(S, block_kv)
    heads = mask if mask.ndim == 3 else mask[None]
    heads = np.pad(heads, ((0, 0), (0, T_padded - T), (0, S_padded - S)))
    tables = tables_for(heads, N, block_q, block_kv)
    structure = ATTENTION.where(grid=(B, N, T_padded // block_q, tables[0].shape[-1]),
                                outside={"pad", "slice"})
    ran = measure(splash.splash_attention, q, k, v, mask=mask, **asked, structure=structure)
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

    check(ran, attention(q, k, v, mask).astype(dtype), blocks=(1, 1, block_q, None),
          axes="B N T H", tolerance=1e-4 if dtype == "float32" else None,
          likely={"head_modulo": lambda: attention(q, k, v, mask,
                                                   head_of=lambda n: n % K).astype(dtype),
                  "first_head_mask": lambda: attention(q, k, v, heads[0, :T, :S])
                  .astype(dtype),
                  "masked_row_mean": masked_row_mean,
                  "padding_seen": padding_seen,
                  "full_skipped": wrong(folded=(PARTIAL,)),
                  "mask_next_not_looked_up": lambda: wrong(
                      mask_of=columns_as_mask_next(heads, tables))(),
                  "l_not_rescaled": wrong(l_rescaled=False)})
    if tpu_sized() or shape not in ("per head", "sliding"):
        return
    block_mask = tables[1]
    check_work(ran, flops=dot_flops(B * int((block_mask != EMPTY).sum()), block_q, block_kv, H))
    itemsize = q.dtype.itemsize
    kv = kv_copies(tables, B, K, block_kv, H, itemsize)
    check_kv_traffic(ran, k, v, kv)
    check_mask_store(ran, tables)
    q_bytes = B * N * T_padded * H * itemsize
    check_traffic(ran, reference=2 * q_bytes + kv + mask_budget(tables, B),
                  minimum=2 * q_bytes + needed_kv(tables, B, K, block_kv, H, itemsize))
    lowers_for_tpu(ran)


@puzzle("splash.multihead")
@pytest.mark.parametrize("bad", [
    pytest.param("heads", id="N=4 K=3 (K does not divide N)"),
    pytest.param("mask", id="mask [T, S + 1]"),
    pytest.param("block", id="block_q=100 (not a multiple of 8)"),
])
def test_multihead_checks_its_arguments(bad, rng):
    """Bad arguments fail up front, with a ValueError, not deep inside a kernel."""
    N, K, T, S, H = 4, 3 if bad == "heads" else 2, 64, 64, 32
    q, k, v = inputs(rng, 1, N, K, T, S, H)
    mask = causal(T, S + 1 if bad == "mask" else S)
    block_q = 100 if bad == "block" else 128
    said = {"heads": f"N={N}, K={K}", "mask": f"mask of shape {mask.shape}",
            "block": f"block_q={block_q}"}[bad]
    try:
        jax.eval_shape(functools.partial(splash.splash_attention, mask=mask, block_q=block_q),
                       q, k, v)
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as error:
        fail("argument_check", f"splash_attention({said}) should raise a ValueError that "
             "names the argument before any kernel is built; it failed later, inside JAX.",
             [("called", f"splash_attention({said})"),
              ("raised", f"{type(error).__name__}: {str(error).splitlines()[0][:200]}")])
    fail("argument_check", f"splash_attention({said}) should raise a ValueError that names "
         "the argument; it raised nothing.",
         [("called", f"splash_attention({said})"), ("raised", "nothing")])
