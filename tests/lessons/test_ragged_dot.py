"""ragged_dot's lesson machinery (pytest_pallas_hints/lessons/ragged_dot.py) on its own:
the visits and metadata models against hand-worked cases and the reference's
make_group_metadata; the byte and flop budgets against what the reference kernels (and
the known wrong ones, from tests/mistakes/ragged_dot/) measurably do; the models of
wrong answers and the checks that name them, on small arrays."""
import types
from pathlib import Path

import jax
import numpy as np
import pytest

from pytest_pallas_hints import runtime
from pytest_pallas_hints.checking import Diagnosed, measure
from pytest_pallas_hints.lessons import ragged_dot as lesson

ROOT = Path(__file__).resolve().parents[2]
MISTAKES = ROOT / "tests" / "mistakes" / "ragged_dot"


def chapter(*patches, replace=()):
    """reference/ragged_dot.py as a module, with the functions of each patch file (a known
    mistake) put in place of the reference's, as --pallas-patch does; ``replace``: (old,
    new) substitutions in the reference's source first (a known wrong kernel no mistake
    file holds)."""
    source = (ROOT / "reference" / "ragged_dot.py").read_text()
    for old, new in replace:
        assert old in source, old
        source = source.replace(old, new)
    namespace = {"__name__": "reference_ragged_dot"}
    exec(compile(source, "reference/ragged_dot.py", "exec"), namespace)
    for patch in patches:
        path = MISTAKES / patch
        exec(compile(path.read_text(), str(path), "exec"), namespace)
    return types.SimpleNamespace(**namespace)


@pytest.fixture(autouse=True)
def interpret_mode():
    """TPU interpret mode for every kernel here, as the plugin sets it for learners."""
    runtime.use_interpret_mode(True)


@pytest.fixture(scope="module")
def reference():
    return chapter()


def floats(shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(dtype)


def ints(shape, seed=0):
    """Integers in [-8, 8] as float32: exact products and float64 sums, whatever the order
    of the additions, so that a rounding to bf16 is the same wherever it is computed."""
    return np.random.default_rng(seed).integers(-8, 9, size=shape).astype(np.float32)


def grouped(lhs, rhs, sizes):
    """The right gmm, float64, written again here."""
    ends = np.cumsum(sizes)
    return np.concatenate([np.asarray(lhs[end - size:end], np.float64) @ rhs[e]
                           for e, (size, end) in enumerate(zip(sizes, ends))])


def transposed(lhs, grad, sizes):
    """The right tgmm, float64, written again here: lhs [K, M], grad [M, N]."""
    ends = np.cumsum(sizes)
    return np.stack([np.asarray(lhs[:, end - size:end], np.float64) @ grad[end - size:end]
                     for size, end in zip(sizes, ends)])


# --- visits and metadata ----------------------------------------------------------

# sizes [3, 0, 10, 3], M=16, tm=8: group 0 rows 0-2 (tile 0), group 1 empty (at row 3),
# group 2 rows 3-12 (tiles 0 and 1), group 3 rows 13-15 (tile 1).
HAND = [3, 0, 10, 3]


@pytest.mark.parametrize("wrong, visits", [
    ({}, [(0, 0), (2, 0), (2, 1), (3, 1)]),
    ({"visit_empty": True}, [(0, 0), (1, 0), (2, 0), (2, 1), (3, 1)]),
    ({"owned_only": True}, [(0, 0), (2, 1)]),           # a tile shared at the start: lost
    ({"past_end": True}, [(0, 0), (2, 0), (2, 1), (3, 1), (3, 2)]),   # 16 // 8 = tile 2
    ({"from_zero": True}, [(0, 0), (2, 0), (2, 1), (3, 0)]),
])
def test_visits_of_a_hand_worked_case(wrong, visits):
    assert lesson.visits_of(HAND, 16, 8, **wrong) == visits


def test_an_empty_last_group_visits_the_last_tile_unless_unclamped():
    assert lesson.visits_of([8, 8, 0], 16, 8, visit_empty=True)[-1] == (2, 1)
    assert lesson.visits_of([8, 8, 0], 16, 8, visit_empty=True, unclamped=True)[-1] == (2, 2)


def test_metadata_of_a_hand_worked_case():
    offsets, group_ids, m_tile_ids, num_tiles = lesson.metadata_of(HAND, 16, 8)
    assert offsets.tolist() == [0, 3, 3, 13, 16] and offsets.dtype == np.int32
    assert group_ids.tolist() == [0, 2, 2, 3, 3] and m_tile_ids.tolist() == [0, 0, 1, 1, 1]
    assert int(num_tiles) == 4 and num_tiles.dtype == np.int32   # 2 tiles + 4 groups - 1 steps


PATTERNS = [   # sizes, M, tm
    pytest.param(HAND, 16, 8, id="shared tiles, an empty group"),
    pytest.param([0, 13, 10, 16, 1, 0], 40, 16, id="empty ends, a 1-row group"),
    pytest.param([8, 8, 0], 16, 8, id="empty last group, M a multiple of tm"),
    pytest.param([0, 0, 33], 33, 16, id="every row in the last group"),
    pytest.param([5], 5, 8, id="one group smaller than a tile"),
    pytest.param([0, 40, 0, 24, 16], 80, 8, id="aligned"),
]


@pytest.mark.parametrize("visit_empty", [False, True])
@pytest.mark.parametrize("sizes, M, tm", PATTERNS)
def test_metadata_of_is_what_the_reference_returns(sizes, M, tm, visit_empty, reference):
    made = jax.jit(reference.make_group_metadata, static_argnums=(1, 2),
                   static_argnames="visit_empty_groups")
    theirs = made(np.array(sizes, np.int32), M, tm, visit_empty_groups=visit_empty)
    ours = lesson.metadata_of(sizes, M, tm, visit_empty=visit_empty)
    for mine, yours in zip(ours, theirs):
        yours = np.asarray(yours)
        assert mine.shape == yours.shape and mine.dtype == yours.dtype
        assert mine.tolist() == yours.tolist()


@pytest.mark.parametrize("visit_empty", [False, True])
def test_every_known_wrong_metadata_differs_from_the_right_one(visit_empty):
    """On some pattern each known mistake gives other metadata than the right one, or no
    test could name it. An unclamped empty last group shows only with visit_empty_groups;
    padding with the last group and tile only without it (with it, the last real visit is
    always that one: the last group's, on the last tile, empty or not)."""
    told = set()
    for sizes, M, tm in (pattern.values for pattern in PATTERNS):
        right = lesson.metadata_of(sizes, M, tm, visit_empty=visit_empty)
        for key, wrong in lesson.metadata_mistakes(sizes, M, tm,
                                                   visit_empty=visit_empty).items():
            if any(np.shape(a) != np.shape(b) or np.asarray(a).tolist() != b.tolist()
                   for a, b in zip(wrong, right)):
                told.add(key)
    every = {*lesson.METADATA_MISTAKES, "empty_groups_flag_ignored"}
    assert every - told == {"padding_last_group" if visit_empty else "empty_end_unclamped"}


@pytest.mark.parametrize("key, group_ids, m_tile_ids, offsets, num_tiles", [
    ("shared_tile_forgotten", [0, 2, 2, 2, 2], [0, 1, 1, 1, 1], [0, 3, 3, 13, 16], 2),
    ("padding_zero", [0, 2, 2, 3, 0], [0, 0, 1, 1, 0], [0, 3, 3, 13, 16], 4),
    ("padding_runs_on", [0, 2, 2, 3, 3], [0, 0, 1, 1, 2], [0, 3, 3, 13, 16], 4),
    ("num_tiles_all_steps", [0, 2, 2, 3, 3], [0, 0, 1, 1, 1], [0, 3, 3, 13, 16], 5),
    ("offsets_without_zero", [0, 2, 2, 3, 3], [0, 0, 1, 1, 1], [3, 3, 13, 16, 16], 4),
    ("empty_groups_flag_ignored", [0, 1, 2, 2, 3], [0, 0, 0, 1, 1], [0, 3, 3, 13, 16], 5),
])
def test_known_wrong_metadata_of_a_hand_worked_case(key, group_ids, m_tile_ids, offsets,
                                                    num_tiles):
    wrong = lesson.metadata_mistakes(HAND, 16, 8, visit_empty=False)[key]
    assert [wrong[0].tolist(), wrong[1].tolist(), wrong[2].tolist(), int(wrong[3])] == \
        [offsets, group_ids, m_tile_ids, num_tiles]


def test_check_metadata_names_a_known_mistake_and_passes_the_right_one():
    expected = lesson.metadata_of(HAND, 16, 8)
    mistakes = lesson.metadata_mistakes(HAND, 16, 8, visit_empty=False)
    lesson.check_metadata(tuple(expected), expected, mistakes)
    with pytest.raises(Diagnosed) as failed:
        lesson.check_metadata(mistakes["shared_tile_forgotten"], expected, mistakes)
    assert failed.value.kind == "shared_tile_forgotten"
    with pytest.raises(Diagnosed) as failed:
        lesson.check_metadata(expected[:3], expected, mistakes)
    assert failed.value.kind == "returned"


# --- budgets: bytes and flops against the reference's measured runs -------------------

def test_moved_counts_a_copy_when_the_index_changes_of_the_part_in_bounds():
    # (0, 0) fetched, kept, (1, 0) fetched (4 rows of 8 in bounds), (0, 0) fetched again
    assert lesson.moved([(0, 0), (0, 0), (1, 0), (0, 0)], (8, 128), (12, 128), 4) == \
        (8 + 4 + 8) * 128 * 4


def test_dot_flops_of_a_hand_worked_case():
    # 4 real visits (5 with the empty group's), 2 K blocks, 1 N block, 8 x 128 x 128 tiles
    assert lesson.dot_flops(HAND, 16, 256, 128, 8, 128, 128) == 4 * 2 * 2 * 8 * 128 * 128
    assert lesson.dot_flops(HAND, 16, 256, 128, 8, 128, 128, visit_empty=True) == \
        5 * 2 * 2 * 8 * 128 * 128


@pytest.mark.parametrize("M, K, N, sizes, tiling", [
    pytest.param(72, 129, 129, [0, 30, 3, 39], (64, 128, 128),
                 id="nothing divides, an empty group, a group within a tile"),
    pytest.param(57, 256, 128, [0, 0, 57], (128, 128, 128), id="tm shrinks to 64, last group"),
])
def test_gmm_bytes_and_flops_are_what_the_reference_gmm_does(M, K, N, sizes, tiling,
                                                               reference):
    E, tm, tk, tn = len(sizes), min(tiling[0], -(-M // 8) * 8), min(tiling[1], K), tiling[2]
    lhs, rhs = floats((M, K)), floats((E, K, N), seed=1)
    sizes = np.array(sizes, np.int32)
    ran = measure(reference.gmm, lhs, rhs, sizes, tiling=tiling, structure=None)
    np.testing.assert_allclose(ran.output, grouped(lhs, rhs, sizes), rtol=1e-4, atol=1e-3)
    nbytes, minimum = lesson.gmm_bytes(M, K, N, E, sizes, tm, tk, tn, 4)
    assert ran.traffic.total == nbytes
    assert minimum == (M * K + (sizes > 0).sum() * K * N + M * N) * 4 <= nbytes
    assert ran.work == lesson.dot_flops(sizes, M, K, N, tm, tk, tn)


def test_tgmm_bytes_and_flops_are_what_the_reference_tgmm_does(reference):
    M, K, N, sizes, tiling = 200, 129, 129, [0, 70, 1, 0, 129, 0], (128, 128, 128)
    E, tm, tk, tn = len(sizes), 128, 128, 128
    lhs, grad = floats((K, M)), floats((M, N), seed=1)
    sizes = np.array(sizes, np.int32)
    ran = measure(reference.tgmm, lhs, grad, sizes, tiling=tiling, structure=None)
    np.testing.assert_allclose(ran.output, transposed(lhs, grad, sizes), rtol=1e-4, atol=1e-3)
    nbytes, minimum = lesson.tgmm_bytes(M, K, N, E, sizes, tm, tk, tn, 4)
    assert ran.traffic.total == nbytes
    assert minimum == (K * M + M * N + E * K * N) * 4 <= nbytes
    assert ran.work == lesson.dot_flops(sizes, M, K, N, tm, tk, tn)
    # every expert's every (k, n) block is stored, the empty groups' too
    assert lesson.stored_blocks(ran) == {(e, k, n) for e in range(E) for k in range(2)
                                         for n in range(2)}


# sizes [0, 13, 10, 16, 1, 0], M=40, tm=16: 6 real visits of 8 steps, 2 padding steps and 2
# empty groups: a kernel computing on its padding steps, and one visiting the empty groups,
# do the same flops and only their bytes tell them apart.
MASKED = dict(M=40, K=128, N=128, sizes=[0, 13, 10, 16, 1, 0], tm=16, tn=128)


@pytest.mark.parametrize("patch, name", [
    ("masked_computes_padding.py", "padding_steps"),
    ("masked_visits_empty_groups.py", "empty_group_visits"),
])
def test_gmm_wrong_work_is_what_the_known_wrong_kernels_do(patch, name):
    M, K, N, sizes, tm, tn = MASKED.values()
    E = len(sizes)
    wrong = lesson.gmm_wrong_work(sizes, M, K, N, E, tm, K, tn, 4)
    assert wrong["padding_steps"][0] == wrong["empty_group_visits"][0]   # the same flops
    assert wrong["padding_steps"][1] != wrong["empty_group_visits"][1]   # not the same bytes
    lhs, rhs = floats((M, K)), floats((E, K, N), seed=1)
    ran = measure(chapter(patch).gmm_masked, lhs, rhs, np.array(sizes, np.int32), tm=tm,
                  tn=tn, structure=None)
    assert (ran.work, ran.traffic.total) == wrong[name]


@pytest.mark.parametrize("condition, name", [
    ("rows_start < rows_end", "padding_steps"),
    ("visit < num_tiles", "empty_group_computes"),
])
def test_tgmm_wrong_work_is_what_the_known_wrong_kernels_do(condition, name):
    """The reference tgmm with one half of its accumulate condition dropped."""
    # 7 steps: 4 visits with rows, 2 of empty groups, 1 padding step repeating the last
    # group's (which has rows: a padding step computes there)
    M, K, N, sizes, tm = 64, 128, 128, [0, 16, 0, 48], 16
    E, tile = len(sizes), 2 * tm * K * N          # one K block, one N block
    wrong = lesson.tgmm_wrong_work(sizes, M, K, N, E, tm, K, N, 4)
    right = lesson.dot_flops(sizes, M, K, N, tm, K, N)
    assert right == 4 * tile
    assert wrong["padding_steps"][0] == right + tile
    assert wrong["empty_group_computes"][0] == right + 2 * tile
    kit = chapter(replace=[("@pl.when((visit < num_tiles) & (rows_start < rows_end))",
                            f"@pl.when({condition})")])
    lhs, grad = floats((K, M)), floats((M, N), seed=1)
    ran = measure(kit.tgmm, lhs, grad, np.array(sizes, np.int32), tiling=(tm, K, N),
                  structure=None)
    assert (ran.work, ran.traffic.total) == wrong[name]


def test_the_vjp_kernels_are_told_apart_and_held_to_their_budgets(reference):
    """The reference's jax.vjp of ragged_dot: its three kernels found by the arrays they
    read, each meeting the grid, blocks, flops and bytes the differentiable puzzle holds it
    to (the d lhs gmm with K and N swapped)."""
    M, K, N, sizes, tiling = 120, 128, 256, np.array([0, 50, 7, 63], np.int32), (128, 128, 128)
    E, (tm, tk, tn) = len(sizes), (120, 128, 128)
    lhs, rhs, grad = floats((M, K)), floats((E, K, N), seed=1), floats((M, N), seed=2)

    def with_grads(lhs, rhs, sizes, grad, **static):
        out, vjp = jax.vjp(lambda lhs, rhs: reference.ragged_dot(lhs, rhs, sizes, **static),
                           lhs, rhs)
        return (out, *vjp(grad))

    ran = measure(with_grads, lhs, rhs, sizes, grad, tiling=tiling, structure=None)
    kernels, comes_from = lesson.vjp_kernels(ran, {"lhs": lhs, "rhs": rhs, "grad": grad})
    assert set(kernels) == {"output", "d lhs", "d rhs"}
    visits = 1 + E - 1
    grids = {"output": (2, visits, 1), "d lhs": (1, visits, 2), "d rhs": (2, 1, visits)}
    budgets = {"output": (lesson.dot_flops(sizes, M, K, N, tm, tk, tn),
                          lesson.gmm_bytes(M, K, N, E, sizes, tm, tk, tn, 4)),
               "d lhs": (lesson.dot_flops(sizes, M, N, K, tm, tn, tk),
                         lesson.gmm_bytes(M, N, K, E, sizes, tm, tn, tk, 4)),
               "d rhs": (lesson.dot_flops(sizes, M, K, N, tm, tk, tn),
                         lesson.tgmm_bytes(M, K, N, E, sizes, tm, tk, tn, 4))}
    for output, site in kernels.items():
        lesson.check_vjp_structure(output, site, comes_from, grid=grids[output],
                                   sizes={"M": M, "K": K, "N": N, "E": E},
                                   tiles={"M": tm, "K": tk, "N": tn, "E": None})
        flops, (nbytes, minimum) = budgets[output]
        lesson.check_vjp_counts(ran, output, site, flops=flops, moved=(nbytes, nbytes))
        with pytest.raises(Diagnosed) as failed:
            lesson.check_vjp_counts(ran, output, site, flops=flops + 1, moved=(nbytes, minimum))
        assert failed.value.kind == "work_low" and failed.value.name == output


def test_block_shapes_allows_the_argument_transposed():
    block = type("Block", (), {"array_shape": (256, 120)})   # lhs [M, K] held as [K, M]
    tiles = {"M": 120, "K": 128, "N": 128, "E": None}
    assert lesson.block_shapes(block, "MK", {"M": 120, "K": 256}, tiles) == [(128, 120)]
    block.array_shape = (4, 256, 128)                         # rhs [E, K, N] as it is
    assert lesson.block_shapes(block, "EKN", {"E": 4, "K": 256, "N": 128}, tiles) == \
        [(None, 128, 128)]


# --- models of wrong answers, and the checks that name them ----------------------------

def test_following_visits_is_the_right_gmm_and_its_wrong_variants_differ():
    sizes, tm = [3, 0, 10, 3], 8
    lhs, rhs = floats((16, 8)), floats((4, 8, 4), seed=1)
    right = grouped(lhs, rhs, sizes)
    np.testing.assert_allclose(lesson.following_visits(lhs, rhs, sizes, tm), right)
    unmasked = lesson.following_visits(lhs, rhs, sizes, tm, masked=False)
    # tile 0's rows 0-2 are group 0's; group 2's later visit of the tile overwrites them
    np.testing.assert_allclose(unmasked[:3], lhs[:3].astype(np.float64) @ rhs[2])
    zeroed = lesson.following_visits(lhs, rhs, sizes, tm, keep=False)
    assert not zeroed[:3].any() and np.allclose(zeroed[3:8], right[3:8])
    kept = lesson.following_visits(lhs, rhs, sizes, tm, reset=False)
    # group 2's visit of tile 1 adds onto the sum of the two visits of tile 0 before it
    tile_0 = lhs[0:8].astype(np.float64)
    np.testing.assert_allclose(kept[8:13], right[8:13] + (tile_0 @ rhs[0] + tile_0 @ rhs[2])[:5])


def test_kept_columns_are_the_first_k_mod_tk_of_each_block():
    assert lesson.kept_columns(257, 128).tolist() == [0, 128, 256]
    assert lesson.kept_columns(10, 4).tolist() == [0, 1, 4, 5, 8, 9]


def test_in_bf16_rounds_at_every_step():
    parts = [np.full((1,), 256.0), np.full((1,), 1.0), np.full((1,), 1.0)]
    assert lesson.in_bf16(parts).tolist() == [256.0]   # 257 is no bf16: 256 each time
    assert lesson.in_bf16([np.full((1,), 1.5), np.full((1,), 2.0)]).tolist() == [3.5]


def test_the_bf16_accumulations_of_one_step_are_the_right_answer_rounded():
    sizes = [5, 0, 11]
    lhs, rhs = ints((16, 8)), ints((3, 8, 4), seed=1)
    bf16 = lesson.grouped_matmul_in_bf16(lhs, rhs, sizes, tk=8)        # one K block
    np.testing.assert_array_equal(bf16, grouped(lhs, rhs, sizes).astype("bfloat16")
                                  .astype(np.float64))
    grad = ints((16, 4), seed=2)
    bf16 = lesson.transposed_grouped_matmul_in_bf16(lhs.T, grad, sizes, tm=16)   # one tile
    np.testing.assert_array_equal(bf16, transposed(lhs.T, grad, sizes).astype("bfloat16")
                                  .astype(np.float64))


def test_tgmm_unmasked_sums_whole_tiles():
    sizes, tm = [8, 8], 8
    lhs, grad = floats((4, 16)), floats((16, 3), seed=1)
    np.testing.assert_allclose(lesson.tgmm_unmasked(lhs, grad, sizes, tm),   # aligned: right
                               transposed(lhs, grad, sizes))
    unmasked = lesson.tgmm_unmasked(lhs, grad, [3, 13], tm)   # group 1's tile 0 has group 0's
    np.testing.assert_allclose(unmasked[1], lhs.astype(np.float64) @ grad)   # rows too


@pytest.mark.parametrize("numbering, key", [("visit", "rows_from_visit"),
                                            ("tile", "rows_from_zero")])
def test_check_row_numbering_names_rows_numbered_wrong(numbering, key):
    sizes, tm = [3, 0, 10, 3], 8
    lhs, rhs = floats((16, 8)), floats((4, 8, 4), seed=1)
    right = grouped(lhs, rhs, sizes).astype(np.float32)
    lesson.check_row_numbering(right, right, lhs, rhs, sizes, tm, "float32")
    wrong, written = lesson.rows_numbered_wrong(lhs, rhs, sizes, tm, numbering)
    assert written.any() and not np.allclose(wrong[written], right[written])
    yours = np.where(written[:, None], wrong, np.nan).astype(np.float32)
    with pytest.raises(Diagnosed) as failed:
        lesson.check_row_numbering(yours, right, lhs, rhs, sizes, tm, "float32")
    assert failed.value.kind == key


def test_never_written_finds_unwritten_and_stale_experts():
    expected = np.stack([np.full((4, 4), e + 1.0) for e in range(4)])
    assert lesson.never_written(expected, expected, (2, 2), 1e-5) == set()
    out = expected.copy()
    out[1] = np.nan                       # never stored
    out[1, :2, :2] = expected[1, :2, :2]  # (one block of it stored: written)
    out[2] = np.nan
    out[3] = expected[0]                  # expert 0's block left in the buffer
    # an exact copy marks both experts it joins (check_experts_written drops those the
    # walk saw stored)
    assert lesson.never_written(out, expected, (2, 2), 1e-5) == {0, 2, 3}


@pytest.mark.parametrize("sizes, unwritten, kind", [
    ([4, 0, 4], [1], "empty_unwritten"),
    ([4, 0, 4], [2], "last_unwritten"),      # the group of the last real visit
    ([4, 4, 4], [0], "experts_unwritten"),
])
def test_check_experts_written_says_why_from_which_experts(sizes, unwritten, kind):
    expected = np.stack([np.full((4, 4), e + 1.0) for e in range(len(sizes))])
    lesson.check_experts_written(expected, expected, sizes, blocks=(2, 2), tolerance=1e-5)
    out = expected.copy()
    out[unwritten] = np.nan
    with pytest.raises(Diagnosed) as failed:
        lesson.check_experts_written(out, expected, sizes, blocks=(2, 2), tolerance=1e-5,
                                     name="d rhs")
    assert failed.value.kind == kind and failed.value.name == "d rhs"
    stored = {(e, k, n) for e in range(len(sizes)) for k in range(2) for n in range(2)}
    with pytest.raises(Diagnosed) as failed:   # stored, yet NaN: stored NaN
        lesson.check_experts_written(out, expected, sizes, blocks=(2, 2), tolerance=1e-5,
                                     stored=stored)
    assert failed.value.kind == "nan"


def test_several_visits_wrong_names_the_groups_of_several_visits():
    sizes, M, tm = [3, 0, 10, 3], 16, 8        # group 2 visits twice, groups 0 and 3 once
    expected = np.stack([np.full((2, 2), e + 1.0) for e in range(4)])
    out = expected.copy()
    out[2] += 1
    assert lesson.several_visits_wrong(out, expected, sizes, M, tm, 1e-5) == {2}
    out[0] += 1                                # a group of one visit wrong too: not that
    assert lesson.several_visits_wrong(out, expected, sizes, M, tm, 1e-5) == set()
    out[0] -= 1
    with pytest.raises(Diagnosed) as failed:
        lesson.check_several_visits(out, expected, sizes, M, tm, 1e-5)
    assert failed.value.kind == "several_visits_wrong"
    lesson.check_several_visits(out, expected, sizes, M, tm, 1e-5, known=[lambda: out])
