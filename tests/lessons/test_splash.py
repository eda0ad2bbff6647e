"""The splash chapter's lesson machinery (pytest_pallas_hints/lessons/splash.py) on its
own: the masks the tests draw and the families they mean, the block tables, float64
attention and the table-following kernel model, the known-wrong answers, and the
budgets of work and bytes, each against a small case worked by hand or an independent
computation (reference/splash.py's NumPy, its kernels measured, a known mistake's
function run)."""
import math
import types
from pathlib import Path

import numpy as np
import pytest

from pytest_pallas_hints import Rng, runtime
from pytest_pallas_hints.checking import Diagnosed, measure
from pytest_pallas_hints.lessons import splash as lesson
from pytest_pallas_hints.lessons.splash import EMPTY, FULL, PARTIAL

ROOT = Path(__file__).resolve().parents[2]


def reference(*mistakes):
    """reference/splash.py as a module of its own, the functions of the known mistakes
    tests/mistakes/splash/<name>.py in place of the reference's (as --pallas-patch)."""
    module = types.ModuleType("reference_splash_" + "_".join(mistakes))
    for path in [ROOT / "reference" / "splash.py",
                 *(ROOT / "tests" / "mistakes" / "splash" / f"{m}.py" for m in mistakes)]:
        module.__file__ = str(path)
        exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


REFERENCE = reference()


@pytest.fixture(autouse=True)
def interpret_mode():
    runtime.use_interpret_mode(True)


@pytest.fixture(autouse=True)
def no_chapter_loaded(monkeypatch):
    """The kernels here come from files the tests load themselves."""
    from pytest_pallas_hints import chapters

    monkeypatch.setattr(chapters, "_loaded", set())


def close(yours, expected, rtol=1e-5):
    np.testing.assert_allclose(np.asarray(yours, np.float64), np.asarray(expected, np.float64),
                               rtol=rtol, atol=rtol, equal_nan=True)


def tiles(rows):
    """A mask from a picture: one string per row, '#' visible."""
    return np.array([[c == "#" for c in row] for row in rows])


# --- masks --------------------------------------------------------------------

def test_causal_window_and_prefix_by_hand():
    assert (lesson.causal(3, 4) == tiles(["#...", "##..", "###."])).all()
    assert (lesson.causal(3, 4, prefix=2) == tiles(["##..", "##..", "###."])).all()
    assert (lesson.window(3, 4, 1, 0) == tiles(["#...", "##..", ".##."])).all()
    assert (lesson.window(3, 4, None, 1) == tiles(["##..", "###.", "####"])).all()
    assert (lesson.window(3, 4, 0, None) == tiles(["####", ".###", "..##"])).all()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("T, S, block_q, block_kv", [(64, 96, 16, 32), (96, 160, 32, 32),
                                                     (32, 64, 8, 8)])
def test_random_blocks_keeps_its_promises(T, S, block_q, block_kv, seed):
    """Each row of tiles holds a full, an empty and a partial tile (as far as it is long);
    from 4 tiles on, an odd row has one empty tile more than an even one; row 0 ends on
    a tile with keys; with every_row_sees each query sees a key."""
    for every_row_sees in (True, False):
        mask = lesson.random_blocks(Rng(seed), T, S, block_q, block_kv,
                                    every_row_sees=every_row_sees)
        categories = REFERENCE.block_categories(mask, block_q, block_kv)
        nkv = S // block_kv
        for i, row in enumerate(categories):
            assert {EMPTY, FULL, PARTIAL} <= set(row.tolist()) or nkv < 3
            if nkv > 3:
                empty_even = (categories[i - i % 2] == EMPTY).sum()
                assert (row == EMPTY).sum() == empty_even + i % 2
        assert categories[0, -1] != EMPTY
        if every_row_sees:
            assert mask.any(axis=-1).all()


def test_long_prompt_full_then_one_partial_then_empty():
    """Prompts end half-way through the third kv block from the end (`shorter` earlier)."""
    T, S, block_kv = 64, 1024, 128
    for shorter in (0, 1, 2):
        categories = REFERENCE.block_categories(lesson.long_prompt(T, S, block_kv, shorter),
                                                64, block_kv)[0]
        partial = S // block_kv - 3 - shorter
        assert categories.tolist() == [FULL] * partial + [PARTIAL] + [EMPTY] * (2 + shorter)


@pytest.mark.parametrize("T, S", [(24, 40), (33, 17)])
@pytest.mark.parametrize("family", list(lesson.FAMILIES))
def test_families_mean_what_reference_make_mask_builds(family, T, S):
    for seed in range(3):
        options, expected = lesson.FAMILIES[family](T, S, Rng(seed))
        assert (REFERENCE.make_mask(T, S, **options) == expected).all()
        causal = lesson.causal(T, S, prefix=options.get("prefix", 0))
        assert (lesson.expected_with(options, T, S, causal) == expected).all()


def test_expected_with_replaces_the_causal_rule_only():
    everything = np.ones((4, 6), bool)
    options = dict(causal=True, window=(1, None))
    assert (lesson.expected_with(options, 4, 6, everything)
            == lesson.window(4, 6, 1, None)).all()
    assert (lesson.expected_with(dict(window=(0, 0)), 4, 6, ~everything)
            == np.eye(4, 6, dtype=bool)).all()   # not causal: the rule is not used


# --- the tables ---------------------------------------------------------------

MASK = tiles(["##..##..",   # 2 x 4 tiles of 2 x 2: FULL EMPTY FULL EMPTY
              "##..##..",
              "#..#.#..",   #                       PARTIAL PARTIAL PARTIAL EMPTY
              "#..#.#.."])


def test_categories_of_by_hand_and_as_the_reference():
    expected = [[FULL, EMPTY, FULL, EMPTY], [PARTIAL, PARTIAL, PARTIAL, EMPTY]]
    assert lesson.categories_of(MASK, 2, 2).tolist() == expected
    mask = lesson.random_blocks(Rng(1), 96, 160, 32, 32)
    heads = np.stack([mask, ~mask])
    assert (lesson.categories_of(heads, 32, 32)
            == REFERENCE.block_categories(heads, 32, 32)).all()
    assert [at for at, _ in lesson.blocks_of(heads[:, :64, :64], 32, 32)] == [
        (n, i, j) for n in range(2) for i in range(2) for j in range(2)]


def test_ahead_fills_from_the_next_needed_entry():
    values = np.array([[[5, 0, 7], [0, 9, 0]], [[1, 2, 3], [4, 5, 6]]])
    needed = np.array([[[1, 0, 1], [0, 1, 0]], [[0, 0, 0], [0, 0, 0]]], bool)
    assert lesson.ahead(values, needed).tolist() == [[[5, 7, 7], [9, 9, 9]],
                                                     [[0, 0, 0], [0, 0, 0]]]
    assert (lesson.ahead(values, needed) == REFERENCE.fill_ahead(values, needed)).all()


def test_compacted_by_hand_and_as_the_reference():
    data_next, block_mask = lesson.compacted(lesson.categories_of(MASK, 2, 2))
    assert data_next.tolist() == [[0, 2, 0], [0, 1, 2]]   # row 0's padding: row 1's first
    assert block_mask.tolist() == [[FULL, FULL, EMPTY], [PARTIAL, PARTIAL, PARTIAL]]
    for seed in range(3):
        categories = lesson.random_categories(Rng(seed), 3, 4, 7, 2)
        for yours, theirs in zip(lesson.compacted(categories), REFERENCE.compact(categories)):
            assert (yours == theirs).all()
    empty = np.zeros((2, 3), np.int8)
    assert [t.tolist() for t in lesson.compacted(empty)] == [[[0], [0]], [[0], [0]]]


def test_deduplicated_by_hand_and_as_the_reference():
    stored, index = lesson.deduplicated(MASK, 2, 2)
    assert stored.tolist() == [[[True, False], [True, False]], [[False, True], [False, True]]]
    assert index.tolist() == [[0, 0, 0, 0], [0, 1, 1, 0]]   # tiles (1, 1), (1, 2) alike
    for seed in range(3):
        mask = np.stack([lesson.random_blocks(Rng(seed), 64, 96, 16, 32) for _ in range(2)])
        for yours, theirs in zip(lesson.deduplicated(mask, 16, 32),
                                 REFERENCE.dedup_blocks(mask, 16, 32)):
            assert (yours == theirs).all()
    stored, index = lesson.deduplicated(np.ones((4, 4), bool), 2, 2)
    assert stored.shape == (1, 2, 2) and not stored.any() and not index.any()


@pytest.mark.parametrize("store", ["distinct", "every"])
def test_tables_for_point_every_partial_step_at_its_tile(store):
    mask = np.stack([lesson.random_blocks(Rng(n), 64, 128, 16, 32) for n in range(2)])
    data_next, block_mask, mask_next, mask_blocks = lesson.tables_for(mask, 2, 16, 32,
                                                                      store=store)
    steps = 0
    for n, i, j in zip(*np.nonzero(block_mask == PARTIAL)):
        tile = mask[n, i * 16:(i + 1) * 16, data_next[n, i, j] * 32:][:, :32]
        assert (mask_blocks[mask_next[n, i, j]] == tile).all()
        steps += 1
    assert steps == int((lesson.categories_of(mask, 16, 32) == PARTIAL).sum())
    one = lesson.tables_for(mask[0], 3, 16, 32, store=store)   # one mask for 3 heads
    assert all(table.shape[0] == 3 and (table == table[:1]).all() for table in one[:3])
    if store == "every":
        assert len(mask_blocks) == 2 * 4 * 4
    # padding steps name the next partial step's block (ahead), as compacted's data_next
    assert (mask_next == lesson.ahead(mask_next, block_mask == PARTIAL)).all()


def test_padded_shrinks_then_pads():
    assert lesson.padded(5, 128) == (8, 8)
    assert lesson.padded(300, 128) == (128, 384)
    assert lesson.padded(100, 64) == (64, 128)
    assert lesson.padded(2000, 128) == (128, 2048)


def test_previous_filled_by_hand():
    data_next = np.array([[[3, 1, 1], [2, 0, 0]]])
    padding = np.array([[[True, False, True], [False, True, True]]])
    assert lesson.previous_filled(data_next, padding).tolist() == [[[0, 1, 1], [2, 2, 2]]]


def test_columns_as_mask_next_reads_block_index_by_column():
    """Tiles EMPTY, PARTIAL a, EMPTY, PARTIAL b: block_index [0, 0, 0, 1], the list
    visits kv blocks 1 and 3; mask_next looks them up (0, 1), the columns read 0, 0."""
    heads = tiles(["..#....#", "..#....#"])[None]
    tables = lesson.tables_for(heads, 1, 2, 2)
    assert tables[0].tolist() == [[[1, 3]]] and tables[2].tolist() == [[[0, 1]]]
    of = lesson.columns_as_mask_next(heads, tables)
    assert [of(0, 0, j) for j in range(2)] == [0, 0]


# --- attention in float64 and the table-following model ------------------------

def qkv(rng, B=1, N=2, K=1, T=32, S=64, H=8, **options):
    return lesson.inputs(rng, B, N, K, T, S, H, **options)


def test_attention_against_a_loop_over_queries(rng):
    q, k, v = qkv(rng, N=4, K=2, T=6, S=5)
    mask = np.stack([lesson.causal(6, 5), lesson.window(6, 5, 1, 1), ~lesson.causal(6, 5),
                     np.zeros((6, 5), bool)])
    o = lesson.attention(q, k, v, mask)
    for n, t in np.ndindex(4, 6):
        keys = np.flatnonzero(mask[n, t])
        if not keys.size:
            assert (o[0, n, t] == 0).all()
            continue
        s = k[0, n // 2, keys].astype(np.float64) @ q[0, n, t] / math.sqrt(8)
        p = np.exp(s - s.max())
        close(o[0, n, t], p @ v[0, n // 2, keys] / p.sum())


def test_attention_options_are_the_inputs_changed(rng):
    """sm_scale scales the scores; head_of picks the K/V head of each query head."""
    q, k, v = qkv(rng, N=4, K=2)
    mask = lesson.causal(32, 64)
    close(lesson.attention(q, k, v, mask, sm_scale=1.0),
          lesson.attention(np.asarray(q, np.float64) * math.sqrt(8), k, v, mask))
    modulo = [0, 1, 0, 1]
    close(lesson.attention(q, k, v, mask, head_of=lambda n: n % 2),
          lesson.attention(q, k[:, modulo], v[:, modulo], mask))


def test_inputs_shift_every_score_by_about_shift(rng):
    q, k, v = lesson.inputs(rng, 1, 2, 1, 16, 32, 64, scale=1.0, shift=100.0)
    s = np.einsum("bnth,bksh->bnts", q, k) / 8
    assert q.shape == (1, 2, 16, 64) and k.shape == v.shape == (1, 1, 32, 64)
    assert 90 < s.min() and s.max() < 110


@pytest.mark.parametrize("store", ["distinct", "every"])
def test_following_the_right_tables_is_attention(store, rng):
    q, k, v = qkv(rng, scale=3.0)
    mask = np.stack([lesson.random_blocks(Rng(n), 32, 64, 8, 16) for n in range(2)])
    mask[1, 3] = False                               # a query that sees no key
    tables = lesson.tables_for(mask, 2, 8, 16, store=store)
    close(lesson.following(q, k, v, tables), lesson.attention(q, k, v, mask))


def test_following_switches_by_hand(rng):
    """Each switch of the model against masks where its kernel is worked out by hand."""
    q, k, v = qkv(rng, N=1, scale=3.0)
    mask = np.zeros((32, 64), bool)
    mask[:16, 16:32], mask[:16, 48:] = True, lesson.causal(16, 16)   # row 0: FULL, PARTIAL
    mask[16:, :16] = lesson.causal(16, 16)                           # row 1: PARTIAL
    tables = lesson.tables_for(mask, 1, 16, 16)
    assert tables[0].tolist() == [[[1, 3], [0, 0]]]
    only = lesson.categories_of(mask, 16, 16)
    tile = np.ones((16, 16), bool)
    # folded=(PARTIAL,): the full tile skipped
    close(lesson.following(q, k, v, tables, folded=(PARTIAL,)),
          lesson.attention(q, k, v, mask & np.kron(only == PARTIAL, tile)))
    # full_masked: the full tile read under the next partial step's block (causal)
    causal_twice = mask.copy()
    causal_twice[:16, 16:32] = lesson.causal(16, 16)
    close(lesson.following(q, k, v, tables, full_masked=True),
          lesson.attention(q, k, v, causal_twice))
    # kv_of = j: row 0 reads kv blocks 0 and 1 as its (full, partial) steps
    moved = np.zeros_like(mask)
    moved[:16, :16], moved[:16, 16:32] = True, lesson.causal(16, 16)
    moved[16:] = mask[16:]
    close(lesson.following(q, k, v, tables, kv_of=lambda n, i, j: j),
          lesson.attention(q, k, v, moved))
    # stored_at=0: the output stored after each list's first step
    first = mask.copy()
    first[:16, 48:] = False
    close(lesson.following(q, k, v, tables, stored_at=0), lesson.attention(q, k, v, first))
    assert np.isnan(lesson.following(q, k, v, tables, stored_at=2)).all()   # never stored
    # category_of: row 1's partial step taken as full
    full_row = mask.copy()
    full_row[16:, :16] = True
    close(lesson.following(q, k, v, tables, category_of=lambda n, i, j: [FULL, EMPTY][j]),
          lesson.attention(q, k, v, np.where(np.arange(32)[:, None] < 16,
                                             mask & ~(np.arange(64) >= 48), full_row)))
    # mask_of: the partial steps read another stored block (all-visible ones here)
    blocks = tables[3]
    close(lesson.following(q, k, v, (*tables[:3], np.concatenate([blocks, tile[None]])),
                           mask_of=lambda n, i, j: len(blocks)),
          lesson.attention(q, k, v, mask | np.kron(only == PARTIAL, tile)))
    # sm_scale
    close(lesson.following(q, k, v, tables, sm_scale=0.5),
          lesson.attention(q, k, v, mask, sm_scale=0.5))


def test_following_l_not_rescaled_by_hand(rng):
    """Two steps of one query row: l = l1 + sum(p2) where the right sum is
    exp(m1 - m2) * l1 + sum(p2); acc is rescaled either way."""
    q, k, v = qkv(rng, N=1, T=8, S=16, scale=3.0)
    tables = lesson.tables_for(np.ones((8, 16), bool), 1, 8, 8)
    s = np.einsum("th,sh->ts", q[0, 0].astype(np.float64), k[0, 0].astype(np.float64))
    s /= math.sqrt(8)
    m1, m2 = s[:, :8].max(-1, keepdims=True), s.max(-1, keepdims=True)
    p1, p2 = np.exp(s[:, :8] - m1), np.exp(s[:, 8:] - m2)
    l = p1.sum(-1, keepdims=True) + p2.sum(-1, keepdims=True)
    acc = np.exp(m1 - m2) * (p1 @ v[0, 0, :8]) + p2 @ v[0, 0, 8:]
    close(lesson.following(q, k, v, tables, l_rescaled=False)[0, 0], acc / l)


# --- the known wrong answers against the known mistakes -------------------------

def run_numpy_mistake(name, function, *args):
    return getattr(reference(name), function)(*args)


@pytest.mark.parametrize("known, likely", [
    ("categories_codes_swapped", "codes_swapped"),
    ("categories_full_if_rows_see", "rows_see"),
    ("categories_not_blocks", "not_blocks"),
])
def test_categories_mistakes_are_the_mistakes(known, likely):
    mask = np.stack([lesson.random_blocks(Rng(n), 48, 48, 16, 8, every_row_sees=False)
                     for n in range(3)])
    expected = lesson.categories_of(mask, 16, 8)
    model = lesson.categories_mistakes(mask, expected, 16, 8)[likely]()
    assert (run_numpy_mistake(known, "block_categories", mask, 16, 8) == model).all()
    assert (model != expected).any()


def test_categories_mistakes_any_only_and_all_only():
    expected = lesson.categories_of(MASK, 2, 2)
    likely = lesson.categories_mistakes(MASK, expected, 2, 2)
    assert likely["any_only"]().tolist() == [[1, 0, 1, 0], [1, 1, 1, 0]]
    assert likely["all_only"]().tolist() == [[1, 0, 1, 0], [0, 0, 0, 0]]


@pytest.mark.parametrize("known, table, likely", [
    ("compact_categories_first_n", 1, "categories_first_n"),
    ("compact_fill_ahead_on_block_mask", 1, "padding_category"),
    ("compact_returns_swapped", 1, "returns_swapped"),
    ("compact_fill_ahead_full_only", 0, "fill_ahead_full_only"),
    ("compact_padding_zero", 0, "padding_zero"),
])
def test_compact_mistakes_are_the_mistakes(known, table, likely):
    categories = lesson.random_categories(Rng(0), 3, 4, 7, 2)
    data_next, block_mask = lesson.compacted(categories)
    builder = lesson.block_mask_mistakes if table else lesson.data_next_mistakes
    model = builder(categories, data_next, block_mask)[likely]()
    assert (np.asarray(run_numpy_mistake(known, "compact", categories)[table]) == model).all()
    assert (model != (data_next, block_mask)[table]).any()


def test_padding_repeats_previous_by_hand():
    categories = np.array([[0, 2, 0, 1], [0, 0, 0, 0], [1, 0, 0, 0]], np.int8)
    data_next, block_mask = lesson.compacted(categories)
    assert data_next.tolist() == [[1, 3], [0, 0], [0, 0]]
    likely = lesson.data_next_mistakes(categories, data_next, block_mask)
    assert likely["padding_repeats_previous"]().tolist() == [[1, 3], [3, 3], [0, 0]]


@pytest.mark.parametrize("known, likely", [
    ("dedup_index_one_based", "index_one_based"),
    ("dedup_every_partial_block", "index_per_tile"),
])
def test_block_index_mistakes_are_the_mistakes(known, likely):
    mask = np.stack([lesson.random_blocks(Rng(n), 96, 160, 32, 32, every_row_sees=False)
                     for n in range(2)])
    categories = lesson.categories_of(mask, 32, 32)
    _, index = lesson.deduplicated(mask, 32, 32)
    model = lesson.block_index_mistakes(categories, index)[likely]()
    yours = run_numpy_mistake(known, "dedup_blocks", mask, 32, 32)[1]
    assert (np.where(categories == PARTIAL, yours, 0) == model).all()


def test_sorted_patterns_is_the_mistake():
    mask = lesson.window(64, 128, 30, 10)
    stored, _ = lesson.deduplicated(mask, 16, 32)
    model = lesson.mask_blocks_mistakes(stored)["sorted_patterns"]()
    assert (run_numpy_mistake("dedup_sorted_patterns", "dedup_blocks", mask, 16, 32)[0]
            == model).all()
    assert (model != stored).any()


@pytest.mark.parametrize("known, likely", [
    ("families_causal_bottom_right", "causal_bottom_right"),
    ("families_prefix_narrows", "prefix_narrows"),
    ("families_window_exclusive", "window_exclusive"),
    ("families_window_none_as_zero", "window_none_as_zero"),
])
def test_families_mistakes_are_the_mistakes(known, likely):
    compared = 0
    for family in lesson.FAMILIES:
        for T, S in ((24, 40), (33, 17)):
            options, expected = lesson.FAMILIES[family](T, S, Rng(0))
            model = lesson.families_mistakes(options, expected, T, S).get(likely)
            if model is not None:
                yours = reference(known).make_mask(T, S, **options)
                assert (yours == model()).all(), (family, T, S)
                compared += 1
    assert compared


def test_families_mistakes_by_hand():
    options, expected = dict(causal=True, prefix=2), lesson.causal(3, 4, prefix=2)
    likely = lesson.families_mistakes(options, expected, 3, 4)
    assert (likely["prefix_inclusive"]() == tiles(["###.", "###.", "###."])).all()
    assert (likely["prefix_without_causal"]() == tiles(["##..", "##..", "##.."])).all()
    assert (likely["causal_strict"]() == tiles([".#..", "#...", "##.."])).all()
    options = dict(window=(1, 2))
    likely = lesson.families_mistakes(options, lesson.window(3, 4, 1, 2), 3, 4)
    assert (likely["window_sides_swapped"]() == lesson.window(3, 4, 2, 1)).all()
    assert (likely["window_exclusive"]() == lesson.window(3, 4, 0, 1)).all()
    options = dict(segments=(np.array([0, 0, 1]), np.array([0, 1, 1, 1])))
    likely = lesson.families_mistakes(options, lesson.causal(3, 4), 3, 4)
    assert likely["segments_ignored"]().all()


def test_online_step_mistake_hidden_counted(rng):
    expected, values = rng.normal((4, 3)), rng.normal((6, 3))
    sees = np.array([[True], [False], [True], [False]])
    wrong = lesson.online_step_mistakes(expected, values, sees)["hidden_counted"]()
    close(wrong[[0, 2]], expected[[0, 2]])
    close(wrong[[1, 3]], np.stack([values.mean(axis=0)] * 2))


# Kernel mistakes: their outputs against the models the tests name them by.
KERNEL_MISTAKES = [
    ("skip_empty_l_not_rescaled", "skip_empty", "l_not_rescaled"),
    ("skip_empty_start_every_step", "skip_empty", "start_every_step"),
    ("skip_empty_partial_as_full", "skip_empty", "partial_unmasked"),
    ("skip_empty_no_scale", "skip_empty", "no_scale"),
    ("sparse_grid_kv_follows_j", "sparse_grid", "kv_follows_j"),
    ("sparse_grid_category_head0", "sparse_grid", "category_head0"),
    ("sparse_grid_finish_wrong_axis", "sparse_grid", "finish_wrong_axis"),
    ("sparse_grid_full_masked", "sparse_grid", "full_masked"),
    ("sparse_grid_mask_from_kv_index", "sparse_grid", "mask_from_kv_index"),
    ("multihead_first_head_mask", "multihead", "first_head_mask"),
    ("multihead_full_tiles_skipped", "multihead", "full_skipped"),
    ("multihead_mask_next_columns", "multihead", "mask_next_not_looked_up"),
    ("multihead_padding_visible", "multihead", "padding_seen"),
]


@pytest.mark.parametrize("known, puzzle, likely", KERNEL_MISTAKES,
                         ids=[m for m, _, _ in KERNEL_MISTAKES])
def test_kernel_mistakes_are_their_models(known, puzzle, likely):
    module = reference(known)
    rng = Rng(7)
    if puzzle == "skip_empty":
        T, S, block_q, block_kv = 32, 96, 16, 32
        q, k, v = lesson.inputs(rng, 1, 2, 2, T, S, 64, scale=3.0)
        mask = lesson.random_blocks(rng, T, S, block_q, block_kv)
        yours = measure(module.flash_block_mask, q, k, v, mask=mask, block_q=block_q,
                        block_kv=block_kv, structure=None).output
        model = lesson.skip_empty_mistakes(q, k, v, mask, block_q, block_kv, q.dtype)
    elif puzzle == "sparse_grid":
        T, S, block_q, block_kv = 32, 128, 16, 32
        q, k, v = lesson.inputs(rng, 1, 2, 1, T, S, 64, scale=3.0)
        mask = np.stack([lesson.random_blocks(rng, T, S, block_q, block_kv),
                         lesson.long_prompt(T, S, block_kv, 0)])
        tables = lesson.tables_for(mask, 2, block_q, block_kv)
        yours = measure(module.splash_call, q, k, v, *tables, structure=None).output
        model = lesson.sparse_grid_mistakes(q, k, v, mask, tables, q.dtype)
    else:   # T and S padded; a sliding window (lists past kv block 0), full tiles, a
        B, N, K, T, S = 1, 4, 2, 100, 130   # query that sees no key, random tiles
        q, k, v = lesson.inputs(rng, B, N, K, T, S, 64, scale=3.0)
        mask = np.stack([lesson.causal(T, S) & lesson.window(T, S, 40, None),
                         lesson.causal(T, S, prefix=40), lesson.causal(T, S),
                         lesson.random_blocks(rng, T, S, 4, 2)])
        mask[2, 5] = False
        block_q, T_padded = lesson.padded(T, 16)
        block_kv, S_padded = lesson.padded(S, 32)
        heads = np.pad(mask, ((0, 0), (0, T_padded - T), (0, S_padded - S)))
        tables = lesson.tables_for(heads, N, block_q, block_kv)
        yours = measure(module.splash_attention, q, k, v, mask=mask, block_q=16,
                        block_kv=32, structure=None).output
        model = lesson.multihead_mistakes(q, k, v, mask, heads, tables, q.dtype)
    close(yours, model[likely](), rtol=1e-4)
    right = lesson.attention(q, k, v, mask)
    assert not np.allclose(np.asarray(yours), right, rtol=1e-3, atol=1e-3, equal_nan=True)


def test_multihead_masked_row_mean_by_hand(rng):
    """A query that sees no key, in a q block that visits one tile: the mean of that
    tile's values (exp(0) = 1 for each hidden key)."""
    q, k, v = lesson.inputs(rng, 1, 1, 1, 16, 32, 8)
    mask = np.zeros((16, 32), bool)
    mask[1:, 8:16] = True      # query 0 sees nothing; q block 0 visits kv block 1
    heads, tables = mask[None], lesson.tables_for(mask, 1, 16, 8)
    wrong = lesson.multihead_mistakes(q, k, v, mask, heads, tables, "float32")
    close(wrong["masked_row_mean"]()[0, 0, 0], v[0, 0, 8:16].mean(axis=0), rtol=1e-6)
    close(wrong["masked_row_mean"]()[0, 0, 1:], lesson.attention(q, k, v, mask)[0, 0, 1:])


# --- budgets of work and bytes, against the reference kernels measured ----------

def test_dot_flops_by_hand():
    assert lesson.dot_flops(3, 8, 16, 4) == 3 * (2 * 8 * 16 * 4) * 2


@pytest.mark.parametrize("B, N, K, store", [(1, 4, 2, "distinct"), (2, 2, 1, "every")])
def test_budgets_are_what_the_reference_moves(B, N, K, store):
    """splash_call's work, K/V bytes, mask bytes and total, measured, are the budgets;
    needed_kv is the K/V blocks some query needs, counted from the mask itself."""
    T, S, H, block_q, block_kv = 32, 128, 64, 16, 32
    rng = Rng(3)
    q, k, v = lesson.inputs(rng, B, N, K, T, S, H)
    mask = np.stack([lesson.random_blocks(rng, T, S, block_q, block_kv) for _ in range(N)])
    mask[-1] = lesson.long_prompt(T, S, block_kv, 1)   # a shorter list: padding steps
    tables = lesson.tables_for(mask, N, block_q, block_kv, store=store)
    ran = measure(REFERENCE.splash_call, q, k, v, *tables, structure=None)
    visited = int((tables[1] != EMPTY).sum())
    assert ran.work == lesson.dot_flops(B * visited, block_q, block_kv, H)
    kv = lesson.kv_copies(tables, B, K, block_kv, H, 4)
    assert ran.bytes_from(k) + ran.bytes_from(v) == kv
    # mask blocks: at most one fetch per partial step (at least one per head); the
    # pipeline skips a fetch where mask_next repeats, so the reference moves less
    partial = (lesson.categories_of(mask, block_q, block_kv) == PARTIAL).sum(axis=(1, 2))
    assert lesson.mask_budget(tables, B) == \
        B * int(np.maximum(partial, 1).sum()) * block_q * block_kv
    mask_bytes = ran.bytes_from(tables[3])
    assert 0 < mask_bytes <= lesson.mask_budget(tables, B)
    assert ran.traffic.total == 2 * q.nbytes + kv + mask_bytes
    needed = {(n // (N // K), j) for n in range(N)
              for j in np.flatnonzero(lesson.categories_of(mask[n], block_q, block_kv)
                                      .any(axis=0))}
    assert lesson.needed_kv(tables, B, K, block_kv, H, 4) == \
        2 * B * len(needed) * block_kv * H * 4
    lesson.check_kv_traffic(ran, k, v, kv)
    with pytest.raises(Diagnosed) as failed:
        lesson.check_kv_traffic(ran, k, v, kv - 1)
    assert failed.value.kind == "kv_traffic"


def test_kv_copies_by_hand():
    """One head, lists [[1, 3], [0, 0]] (row 1's padding names block 0, already there):
    copies of blocks 1, 3, 0 per batch and head; two K/V heads share nothing."""
    data_next = np.array([[[1, 3], [0, 0]]] * 2)
    tables = (data_next, None, None, None)
    assert lesson.kv_copies(tables, 1, 2, 8, 4, 2) == 2 * (3 + 3) * 8 * 4 * 2
    same = (np.ones((2, 2, 2), int), None, None, None)   # both heads: block 1 throughout
    assert lesson.kv_copies(same, 1, 1, 8, 4, 2) == 2 * 1 * 8 * 4 * 2    # one K/V head
    assert lesson.kv_copies(same, 1, 2, 8, 4, 2) == 2 * 2 * 8 * 4 * 2    # two
    data_next = np.array([[[1, 3], [1, 1]]])   # padding that names another block
    assert lesson.kv_copies((data_next, None, None, None), 2, 1, 8, 4, 2) == \
        2 * 2 * 3 * 8 * 4 * 2


def test_mask_budget_by_hand():
    block_mask = np.array([[[2, 1], [1, 0]], [[2, 2], [0, 0]]])   # 2 partial, then none
    mask_blocks = np.zeros((3, 8, 16), bool)
    assert lesson.mask_budget((None, block_mask, None, mask_blocks), 3) == 3 * (2 + 1) * 128


def test_check_mask_store_counts_what_the_kernel_builds():
    """Tables built inside the measured function: distinct patterns pass, every tile
    stored (more than the distinct patterns) is named."""
    T, S, H = 32, 64, 8
    q, k, v = lesson.inputs(Rng(0), 1, 1, 1, T, S, H)
    mask = lesson.causal(T, S)
    for store, passes in (("distinct", True), ("every", False)):
        tables = lesson.tables_for(mask, 1, 16, 16, store=store)
        ran = measure(lambda q, k, v: REFERENCE.splash_call(q, k, v, *tables), q, k, v,
                      structure=None)
        if passes:
            lesson.check_mask_store(ran, lesson.tables_for(mask, 1, 16, 16))
            continue
        with pytest.raises(Diagnosed) as failed:
            lesson.check_mask_store(ran, lesson.tables_for(mask, 1, 16, 16))
        assert failed.value.kind == "mask_store"


# --- the chapter's own checks, on the known mistakes of the table puzzles ---------

def compact_verdict(compact, categories):
    data_next, block_mask = lesson.compacted(categories)
    with lesson.visits_fit(block_mask):
        yours = compact(categories)
    lesson.returned_pair(yours, "compact returns two tables")
    lesson.check_width(yours, block_mask)
    likely = lesson.data_next_mistakes(categories, data_next, block_mask)
    lesson.check_padding_entries(yours[0], data_next, block_mask, likely)


def dedup_verdict(dedup_blocks, mask):
    with lesson.stack_fallback(mask, 16, 32):
        yours = dedup_blocks(mask, 16, 32)
    lesson.returned_pair(yours, "dedup_blocks returns two arrays")
    lesson.check_stored_blocks(*(np.asarray(x) for x in yours), mask, 16, 32)


def kind(verdict, *args):
    try:
        verdict(*args)
    except Diagnosed as failure:
        return failure.kind
    return ""


@pytest.mark.parametrize("known, expected", [
    ("compact_width_over_q", "width_short"), ("compact_no_min_width", "width_zero"),
    ("compact_padding_leftovers", "padding_entries"), ("compact_returns_swapped", ""),
    ("compact_padding_zero", "")])   # known wrong answers are check()'s to name
def test_compact_checks_on_the_mistakes(known, expected):
    categories = np.array([[2, 0, 0, 1, 0], [0, 0, 0, 0, 0], [1, 1, 0, 0, 2]], np.int8)
    if known == "compact_no_min_width":
        categories[...] = EMPTY
    if known == "compact_width_over_q":
        categories = np.array([[1, 2, 1], [0, 0, 0]], np.int8)   # kv blocks seen once
    assert kind(compact_verdict, REFERENCE.compact, categories) == ""
    assert kind(compact_verdict, reference(known).compact, categories) == expected


@pytest.mark.parametrize("known, expected", [
    ("dedup_no_fallback", "no_fallback"), ("dedup_no_swapaxes", "not_tiles"),
    ("dedup_key_by_count", "merged"), ("dedup_every_partial_block", "not_deduplicated"),
    ("dedup_full_blocks_stored", "full_stored")])
def test_dedup_checks_on_the_mistakes(known, expected):
    if known == "dedup_no_fallback":
        mask = np.ones((64, 128), bool)
    elif known == "dedup_key_by_count":   # two patterns of 8 visible keys each
        mask = np.zeros((64, 128), bool)
        mask[:16, :32] = lesson.window(16, 32, 0, 0)[:, :32]
        mask[16:32, :32] = lesson.window(16, 32, 0, 0)[::-1, :32]
    else:   # tiles of 16 x 32: 4 partial ones of 2 patterns, 2 full
        mask = lesson.causal(64, 128)
    assert kind(dedup_verdict, REFERENCE.dedup_blocks, mask) == ""
    assert kind(dedup_verdict, reference(known).dedup_blocks, mask) == expected


def test_returned_pair_and_check_unseen_rows_empty():
    assert lesson.returned_pair((1, 2), "") == (1, 2)
    with pytest.raises(Diagnosed) as failed:
        lesson.returned_pair([1, 2], "says")
    assert (failed.value.kind, failed.value.facts) == ("returned", [("returned", "list")])
    sees = np.array([[True], [False]])
    lesson.check_unseen_rows_empty(np.array([[2.0], [0.0]]), np.ones((2, 3)) * [[1], [0]],
                                   sees)
    with pytest.raises(Diagnosed) as failed:
        lesson.check_unseen_rows_empty(np.array([[2.0], [3.0]]), np.zeros((2, 3)), sees)
    assert failed.value.kind == "hidden_counted"


def fails_inside(*args, **static):
    raise IndexError("deep inside a kernel")


def test_argument_checks_words():
    lesson.check_mask_rejects(REFERENCE.make_mask, 24, 40, dict(prefix=4), "prefix=4")
    with pytest.raises(Diagnosed) as failed:
        lesson.check_mask_rejects(lambda T, S, **options: np.ones((T, S), bool), 24, 40,
                                  dict(prefix=4), "prefix=4")
    assert failed.value.kind == "argument_check" and "returned a mask" in failed.value.says
    q, k, v = lesson.inputs(Rng(0), 1, 4, 3, 64, 64, 32)
    mask = lesson.causal(64, 64)
    lesson.check_attention_rejects(REFERENCE.splash_attention, "N=4, K=3", q, k, v, mask=mask)
    with pytest.raises(Diagnosed) as failed:
        lesson.check_attention_rejects(fails_inside, "N=4, K=3", q, k, v, mask=mask)
    assert failed.value.kind == "argument_check" and "inside JAX" in failed.value.says
