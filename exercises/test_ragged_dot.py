"""Tests for exercises/ragged_dot.py. Run them, don't edit them:

    pytest exercises/test_ragged_dot.py                 # all puzzles of the chapter
    pytest exercises/test_ragged_dot.py -k masked       # one puzzle
    pytest exercises/test_ragged_dot.py -k masked --hint

The metadata puzzle compares your four arrays with the visits the kit works out
(pytest_pallas_hints/lessons/ragged_dot.py), entry by entry. The kernel puzzles
compare your output with the grouped matmul computed in float64 NumPy, on at least
two shapes and group patterns (empty groups, a group
smaller than a tile, groups that share a tile, M not a multiple of the tile); count
the dot work your kernels executed (only the real visits may compute) and the bytes
they moved between HBM and VMEM (a step past the last visit fetches nothing new);
then check that the kernel would compile for a real TPU. The bf16 configurations of
the puzzles that sum over many steps draw small integers and compare exactly: a
float32 accumulator gets them right, a bf16 one does not. The differentiable puzzle
holds each of its three kernels (told apart by the arrays they read) to the grid,
blocks, work and bytes of the puzzle it builds on. Tests marked `tpu` run realistic
sizes on a real TPU and are skipped elsewhere.
"""
import jax
import numpy as np
import pytest

from pytest_pallas_hints import (Structure, cdiv, chapter, check, check_blocks, check_traffic,
                                 check_work, f64, lowers_for_tpu, measure, run_jax, tpu_sized)
from pytest_pallas_hints.lessons import ragged_dot as lesson   # known wrong answers, budgets

ragged_dot = chapter("ragged_dot")

puzzle = pytest.mark.puzzle
on_tpu = pytest.mark.tpu

# What each kernel lesson requires of your program, checked from its trace: your own
# kernel does the matmul and reads scalar-prefetched metadata; around it, only integer
# work on the group sizes (the metadata) is allowed.
GROUPED = Structure(inside={"dot_general"}, prefetch=True, outside={"metadata"})


# --- group sizes -----------------------------------------------------------------

def group_sizes(rng, M, E, pattern, tm=8):
    """int32 [E] summing to M, drawn for a pattern:

    random   cuts anywhere, with an empty group and a group smaller than a tile
    aligned  every size a multiple of tm, one empty group among them, not the last
    last     every row in the last group (the others empty)
    one      a single group
    edges    empty first and last groups, a group of one row
    """
    if pattern == "one":
        return np.array([M], np.int32)
    if pattern == "last":
        return np.array([0] * (E - 1) + [M], np.int32)
    if pattern == "aligned":
        tiles = M // tm   # the groups between the cuts keep at least one tile each
        cuts = np.sort(rng.permutation(np.arange(1, tiles))[:E - 2]) * tm
        sizes = np.diff(np.concatenate([[0], cuts, [M]]))
        return np.insert(sizes, int(rng.integers((), 0, E - 1)), 0).astype(np.int32)
    if pattern == "edges":
        inner = E - 2
        cuts = np.sort(rng.permutation(M - 2)[:inner - 2] + 1)
        sizes = np.diff(np.concatenate([[0], cuts, [M - 1]]))
        return np.concatenate([[0], sizes, [1, 0]]).astype(np.int32)
    # random: E - 1 non-empty groups, one of them smaller than a tile, and one empty
    small = int(rng.integers((), 1, tm))
    cuts = np.sort(rng.permutation(np.arange(1, M - small))[:E - 3])
    sizes = list(np.diff(np.concatenate([[0], cuts, [M - small]]))) + [small]
    sizes.insert(int(rng.integers((), 1, E - 1)), 0)
    return np.array(sizes, np.int32)


# --- grouped matmuls in float64 NumPy: the expected values -------------------------

def grouped_matmul(lhs, rhs, sizes):
    """out[rows of group e] = lhs[rows of group e] @ rhs[e], in float64."""
    lhs, rhs = f64(lhs, rhs)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    out = np.zeros((lhs.shape[0], rhs.shape[2]))
    for e in range(len(sizes)):
        rows = slice(offsets[e], offsets[e + 1])
        out[rows] = lhs[rows] @ rhs[e]
    return out


def transposed_grouped_matmul(lhs, grad, sizes):
    """out[e] = lhs[:, rows of group e] @ grad[rows of group e] ([K, M], [M, N]), float64;
    zeros for a group without rows."""
    lhs, grad = f64(lhs, grad)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return np.stack([lhs[:, offsets[e]:offsets[e + 1]] @ grad[offsets[e]:offsets[e + 1]]
                     for e in range(len(sizes))])


def shrunk(tiling, M, K, N):
    """The tiles gmm and tgmm use: a tile longer than its dim shrinks to it (tm to M
    rounded up to 8)."""
    tm, tk, tn = tiling
    return min(tm, cdiv(M, 8) * 8), min(tk, K), min(tn, N)


def inputs(rng, M, K, N, E, dtype):
    return rng.normal((M, K), dtype), rng.normal((E, K, N), dtype)


# The long bf16 configurations draw small non-negative integers: every float32 sum of
# their products is exact, so a right kernel's output is the exact sum rounded once to
# bf16, while a bf16 running sum (rounded at every step) drifts as it grows past 256.
EXACT = 1e-3   # one bf16 rounding step off, on sums past 256, is more than this


def integers(rng, shape, dtype, high=4):
    """Integers in [0, high) as floats: exact products, exact float32 sums."""
    return rng.integers(shape, 0, high, dtype=dtype)


def summed(rng, dtype, *shapes):
    """Inputs of the puzzles that sum over many steps: normal in float32; in bf16, small
    non-negative integers, compared EXACTly (a bf16 running sum fails on its values)."""
    if dtype == "bfloat16":
        return [integers(rng, shape, dtype) for shape in shapes]
    return [rng.normal(shape, dtype) for shape in shapes]


def exact_for(dtype):
    return EXACT if dtype == "bfloat16" else tolerance_for(dtype)


def tolerance_for(dtype):
    """float32: the kernel's sums run in another order than NumPy's float64 ones."""
    return 1e-4 if dtype == "float32" else None


# 1 -------------------------------------------------------------------------
@puzzle("ragged_dot.gather")
@pytest.mark.parametrize("M, D, tm, ids, dtype", [
    pytest.param(64, 128, 8, "repeats", "float32",
                 id="M=64 D=128 tm=8 six ids, one repeated in a row"),
    pytest.param(48, 256, 16, "one", "bfloat16", id="M=48 D=256 tm=16 bf16 one id"),
    pytest.param(65536, 1024, 256, "repeats", "bfloat16", id="M=65536 D=1024-tpu",
                 marks=on_tpu),
])
def test_gather(M, D, tm, ids, dtype, rng):
    """Tiles of x in the order of a prefetched list: right values; each tile fetched once
    per run of equal ids."""
    x = rng.normal((M, D), dtype)
    tiles = M // tm
    if ids == "one":
        tile_ids = rng.integers((1,), 1, tiles)
    else:
        tile_ids = rng.permutation(tiles)[:5].astype(np.int32)
        tile_ids = np.insert(tile_ids, 2, tile_ids[1]).astype(np.int32)
        if tile_ids[0] == 0:          # the first tile of x is never the first asked for,
            unused = sorted(set(range(1, tiles)) - set(tile_ids.tolist()))
            tile_ids[0] = unused[-1]  # nor an id the list repeats later (one repeat only)
        if tile_ids.max() < len(tile_ids) < tiles:   # and some id names a tile past the
            tile_ids[-1] = tiles - 1                  # output's: the list is not a grid
    V = len(tile_ids)
    ran = measure(ragged_dot.gather_tiles, x, tile_ids, tm=tm,
                  structure=Structure(prefetch=True, grid=(V,)))
    check_blocks(ran, x=(tm, D))
    expected = x.reshape(tiles, tm, D)[tile_ids].reshape(V * tm, D)
    likely = {"first_tile": lambda: np.tile(x[:tm], (V, 1))}
    if V * tm <= M:
        likely["follows_grid"] = lambda: x[:V * tm]
    check(ran, expected, blocks=(tm, None), axes="V D", likely=likely)
    if tpu_sized():
        return
    itemsize = x.dtype.itemsize
    fetched = lesson.moved([(int(t), 0) for t in tile_ids], (tm, D), (M, D), itemsize)
    distinct = len(set(tile_ids.tolist())) * tm * D * itemsize
    check_traffic(ran, reference=fetched + expected.nbytes, minimum=distinct + expected.nbytes)
    lowers_for_tpu(ran)


# 2 -------------------------------------------------------------------------
@puzzle("ragged_dot.metadata")
@pytest.mark.parametrize("M, E, tm, pattern", [
    pytest.param(80, 6, 8, "random", id="M=80 E=6 tm=8 random sizes"),
    pytest.param(33, 5, 16, "edges", id="M=33 (not a multiple of tm=16) E=5 empty ends"),
    pytest.param(40, 3, 8, "aligned", id="M=40 E=3 tm=8 sizes multiples of tm"),
    pytest.param(24, 1, 8, "one", id="M=24 E=1 one group"),
    pytest.param(32, 5, 8, "edges", id="M=32 (a multiple of tm=8) E=5 empty last group"),
    pytest.param(65536, 256, 512, "random", id="M=65536 E=256-tpu", marks=on_tpu),
])
@pytest.mark.parametrize("visit_empty_groups", [False, True],
                         ids=["gmm", "visit_empty_groups=True"])
def test_metadata(M, E, tm, pattern, visit_empty_groups, rng):
    sizes = group_sizes(rng, M, E, pattern, tm)
    yours = run_jax(ragged_dot.make_group_metadata, sizes, m=M, tm=tm,
                    visit_empty_groups=visit_empty_groups)
    expected = lesson.metadata_of(sizes, M, tm, visit_empty=visit_empty_groups)
    lesson.check_metadata(yours, expected, lesson.metadata_mistakes(
        sizes, M, tm, visit_empty=visit_empty_groups))


# 3 -------------------------------------------------------------------------
@puzzle("ragged_dot.aligned")
@pytest.mark.parametrize("M, K, N, E, tm, tn, pattern, dtype", [
    pytest.param(256, 64, 256, 4, 64, 128, "aligned", "float32",
                 id="M=256 K=64 N=256 E=4 tm=64 tn=128 an empty group"),
    pytest.param(128, 128, 128, 3, 32, 128, "last", "bfloat16",
                 id="M=128 K=N=128 E=3 tm=32 bf16 every row in the last group"),
    pytest.param(8192, 1024, 1024, 8, 512, 512, "aligned", "bfloat16",
                 id="M=8192 K=N=1024 E=8-tpu", marks=on_tpu),
])
def test_aligned(M, K, N, E, tm, tn, pattern, dtype, rng):
    """Group sizes multiples of tm: right values, the work of the real visits only (the
    steps past num_tiles compute nothing), each block fetched once per run."""
    sizes = group_sizes(rng, M, E, pattern, tm)
    lhs, rhs = inputs(rng, M, K, N, E, dtype)
    structure = GROUPED.where(grid=(N // tn, M // tm + E - 1))
    ran = measure(ragged_dot.gmm_aligned, lhs, rhs, sizes, tm=tm, tn=tn, structure=structure)
    check_blocks(ran, lhs=(tm, K), rhs=(None, K, tn))
    expected = grouped_matmul(lhs, rhs, sizes)
    check(ran, expected.astype(dtype), blocks=(tm, tn), axes="M N",
          tolerance=tolerance_for(dtype),
          likely={"first_expert": lambda: (f64(lhs)[0] @ f64(rhs)[0][0]).astype(dtype)})
    if tpu_sized():
        return
    itemsize = lhs.dtype.itemsize
    check_work(ran, flops=lesson.dot_flops(sizes, M, K, N, tm, K, tn),
               wrong=lesson.gmm_wrong_work(sizes, M, K, N, E, tm, K, tn, itemsize))
    reference, minimum = lesson.gmm_bytes(M, K, N, E, sizes, tm, K, tn, itemsize)
    check_traffic(ran, reference=reference, minimum=minimum)
    lowers_for_tpu(ran)


# 4 -------------------------------------------------------------------------
@puzzle("ragged_dot.masked")
@pytest.mark.parametrize("M, K, N, E, tm, tn, pattern, dtype", [
    pytest.param(200, 64, 256, 5, 64, 128, "random", "float32",
                 id="M=200 K=64 N=256 E=5 tm=64 a group smaller than a tile, an empty group"),
    pytest.param(40, 128, 128, 6, 16, 128, "edges", "bfloat16",
                 id="M=40 K=N=128 E=6 tm=16 bf16 empty first and last groups, a 1-row group"),
    pytest.param(64, 128, 128, 4, 16, 128, "random", "float32",
                 id="M=64 K=N=128 E=4 tm=16 (M a multiple of tm: no tile hangs past M)"),
    pytest.param(8192, 1024, 1024, 8, 512, 512, "random", "bfloat16",
                 id="M=8192 K=N=1024 E=8-tpu", marks=on_tpu),
])
def test_masked(M, K, N, E, tm, tn, pattern, dtype, rng):
    """Any group sizes: right values, the work of the real visits only (none for an
    empty group), and bytes: no block fetched for an empty group or a padding step."""
    sizes = group_sizes(rng, M, E, pattern, tm)
    lhs, rhs = inputs(rng, M, K, N, E, dtype)
    structure = GROUPED.where(grid=(N // tn, cdiv(M, tm) + E - 1))
    ran = measure(ragged_dot.gmm_masked, lhs, rhs, sizes, tm=tm, tn=tn, structure=structure)
    check_blocks(ran, lhs=(tm, K), rhs=(None, K, tn))
    likely = {"unmasked_store": lambda: lesson.following_visits(lhs, rhs, sizes, tm,
                                                                masked=False).astype(dtype),
              "other_rows_zeroed": lambda: lesson.following_visits(lhs, rhs, sizes, tm,
                                                                   keep=False).astype(dtype)}
    lesson.check_row_numbering(np.asarray(ran.output),
                               grouped_matmul(lhs, rhs, sizes).astype(dtype),
                               lhs, rhs, sizes, tm, dtype, known=likely.values())
    check(ran, grouped_matmul(lhs, rhs, sizes).astype(dtype), blocks=(tm, tn), axes="M N",
          tolerance=tolerance_for(dtype), likely=likely)
    if tpu_sized():
        return
    itemsize = lhs.dtype.itemsize
    check_work(ran, flops=lesson.dot_flops(sizes, M, K, N, tm, K, tn),
               wrong=lesson.gmm_wrong_work(sizes, M, K, N, E, tm, K, tn, itemsize))
    reference, minimum = lesson.gmm_bytes(M, K, N, E, sizes, tm, K, tn, itemsize)
    check_traffic(ran, reference=reference, minimum=minimum)
    lowers_for_tpu(ran)


# 5 -------------------------------------------------------------------------
@puzzle("ragged_dot.k_axis")
@pytest.mark.parametrize("M, K, N, E, tiling, pattern, dtype", [
    pytest.param(200, 257, 129, 4, (64, 128, 128), "random", "float32",
                 id="M=200 K=257 N=129 E=4 tiling=(64, 128, 128) nothing divides"),
    pytest.param(57, 1024, 128, 3, (128, 128, 128), "last", "bfloat16",
                 id="M=57 K=1024 N=128 E=3 bf16 8 K steps, tm shrinks to 64, every row in "
                    "the last group"),
    pytest.param(8192, 2048, 2048, 8, (512, 512, 512), "random", "bfloat16",
                 id="M=8192 K=N=2048 E=8 bf16-tpu", marks=on_tpu),
])
def test_k_axis(M, K, N, E, tiling, pattern, dtype, rng):
    """gmm: right values (bf16 in, bf16 out, f32 accumulation: over 8 K steps a bf16
    running sum is off), the work of the real visits only, and bytes: each real visit's
    blocks, nothing for a padding step."""
    tm, tk, tn = shrunk(tiling, M, K, N)
    sizes = group_sizes(rng, M, E, pattern, 8)
    lhs, rhs = summed(rng, dtype, (M, K), (E, K, N))
    structure = GROUPED.where(grid=(cdiv(N, tn), cdiv(M, tm) + E - 1, cdiv(K, tk)))
    ran = measure(ragged_dot.gmm, lhs, rhs, sizes, tiling=tiling, structure=structure)
    check_blocks(ran, lhs=(tm, tk), rhs=(None, tk, tn))
    check(ran, grouped_matmul(lhs, rhs, sizes).astype(dtype), blocks=(tm, tn), axes="M N",
          tolerance=exact_for(dtype),
          likely={"acc_not_reset": lambda: lesson.following_visits(lhs, rhs, sizes, tm,
                                                                   reset=False).astype(dtype),
                  "unmasked_store": lambda: lesson.following_visits(lhs, rhs, sizes, tm,
                                                                    masked=False).astype(dtype),
                  "other_rows_zeroed": lambda: lesson.following_visits(
                      lhs, rhs, sizes, tm, keep=False).astype(dtype),
                  "bf16_accumulation": lambda: lesson.grouped_matmul_in_bf16(
                      lhs, rhs, sizes, tk).astype(dtype),
                  "acc_zeroed_every_k": lambda: grouped_matmul(
                      lhs[:, (cdiv(K, tk) - 1) * tk:], rhs[:, (cdiv(K, tk) - 1) * tk:],
                      sizes).astype(dtype),
                  **({"mask_every_block": lambda: grouped_matmul(
                      lhs[:, lesson.kept_columns(K, tk)], rhs[:, lesson.kept_columns(K, tk)],
                      sizes).astype(dtype)} if K % tk else {})})
    if tpu_sized():
        return
    itemsize = lhs.dtype.itemsize
    check_work(ran, flops=lesson.dot_flops(sizes, M, K, N, tm, tk, tn),
               wrong=lesson.gmm_wrong_work(sizes, M, K, N, E, tm, tk, tn, itemsize))
    reference, minimum = lesson.gmm_bytes(M, K, N, E, sizes, tm, tk, tn, itemsize)
    check_traffic(ran, reference=reference, minimum=minimum)
    lowers_for_tpu(ran)


@puzzle("ragged_dot.k_axis")
@pytest.mark.parametrize("bad", [
    pytest.param("groups", id="group_sizes [E + 1]"),
    pytest.param("k", id="rhs [E, K + 1, N]"),
    pytest.param("tm", id="tiling=(100, 128, 128) (tm not a multiple of 8)"),
])
def test_k_axis_checks_its_arguments(bad, rng):
    """Bad arguments fail up front, with a ValueError, not deep inside a kernel."""
    M, K, N, E = 64, 128, 128, 3
    lhs, rhs = inputs(rng, M, K + (bad == "k"), N, E, "float32")
    lhs = lhs[:, :K]
    sizes = np.array([M] + [0] * (E - (bad != "groups")), np.int32)
    tiling = (100, 128, 128) if bad == "tm" else (64, 128, 128)
    said = {"groups": f"group_sizes of shape {sizes.shape}", "k": f"rhs of shape {rhs.shape}",
            "tm": f"tiling={tiling}"}[bad]
    lesson.check_gmm_rejects(ragged_dot.gmm, lhs, rhs, sizes, tiling=tiling, said=said)


# 6 -------------------------------------------------------------------------
@puzzle("ragged_dot.tgmm")
@pytest.mark.parametrize("M, K, N, E, tiling, pattern, dtype", [
    pytest.param(200, 129, 129, 6, (128, 128, 128), "edges", "float32",
                 id="M=200 K=N=129 E=6 empty first and last groups, a 1-row group"),
    pytest.param(1024, 256, 128, 4, (128, 128, 128), "aligned", "bfloat16",
                 id="M=1024 K=256 N=128 E=4 bf16 sizes multiples of tm, a group of 3 row "
                    "tiles or more, fewer visits than steps"),
    pytest.param(256, 128, 128, 5, (128, 128, 128), "edges", "float32",
                 id="M=256 (a multiple of tm) K=N=128 E=5 empty last group"),
    pytest.param(8192, 1024, 1024, 8, (512, 512, 512), "random", "bfloat16",
                 id="M=8192 K=N=1024 E=8 bf16-tpu", marks=on_tpu),
])
def test_tgmm(M, K, N, E, tiling, pattern, dtype, rng):
    """tgmm: right values (zeros for an empty group, written by the kernel; f32
    accumulation: over a group's 3 or more visits a bf16 running sum is off), the work
    of the non-empty visits only, and bytes: each visit's blocks, every expert's block
    written once."""
    tm, tk, tn = shrunk(tiling, M, K, N)
    sizes = group_sizes(rng, M, E, pattern, tm)
    lhs, grad = summed(rng, dtype, (K, M), (M, N))
    structure = GROUPED.where(grid=(cdiv(N, tn), cdiv(K, tk), cdiv(M, tm) + E - 1))
    ran = measure(ragged_dot.tgmm, lhs, grad, sizes, tiling=tiling, structure=structure)
    check_blocks(ran, lhs=(tk, tm), grad=(tm, tn))
    if not tpu_sized():
        lesson.check_tgmm_index_maps(ran, lhs, grad, sizes, M, tm)
    expected = transposed_grouped_matmul(lhs, grad, sizes)
    lesson.check_experts_written(ran.output, expected.astype(dtype), sizes, blocks=(tk, tn),
                                 tolerance=exact_for(dtype), stored=lesson.stored_blocks(ran))
    likely = {"acc_not_reset": lambda: np.cumsum(expected, axis=0).astype(dtype),
              "unmasked_rows": lambda: lesson.tgmm_unmasked(lhs, grad, sizes, tm).astype(dtype),
              "bf16_accumulation": lambda: lesson.transposed_grouped_matmul_in_bf16(
                  lhs, grad, sizes, tm).astype(dtype)}
    lesson.check_several_visits(ran.output, expected.astype(dtype), sizes, M, tm,
                                exact_for(dtype), known=likely.values())
    check(ran, expected.astype(dtype), blocks=(1, tk, tn), axes="E K N",
          tolerance=exact_for(dtype), likely=likely)
    if tpu_sized():
        return
    itemsize = lhs.dtype.itemsize
    check_work(ran, flops=lesson.dot_flops(sizes, M, K, N, tm, tk, tn),
               wrong=lesson.tgmm_wrong_work(sizes, M, K, N, E, tm, tk, tn, itemsize))
    reference, minimum = lesson.tgmm_bytes(M, K, N, E, sizes, tm, tk, tn, itemsize)
    check_traffic(ran, reference=reference, minimum=minimum)
    lowers_for_tpu(ran)


# 7 -------------------------------------------------------------------------
def with_grads(lhs, rhs, sizes, grad, *, attend, **static):
    """attend(lhs, rhs, sizes) and its gradients (d lhs, d rhs) for the cotangent grad."""
    out, vjp = jax.vjp(lambda lhs, rhs: attend(lhs, rhs, sizes, **static), lhs, rhs)
    return (out, *vjp(grad))


@puzzle("ragged_dot.differentiable")
@pytest.mark.parametrize("M, K, N, E, tiling, pattern, dtype", [
    pytest.param(120, 128, 128, 5, (128, 128, 128), "random", "float32",
                 id="M=120 K=N=128 E=5 random sizes, an empty group, tm shrinks to 120: one "
                    "row tile every group shares"),
    pytest.param(256, 256, 512, 3, (128, 128, 256), "last", "bfloat16",
                 id="M=256 K=256 N=512 E=3 tiling=(128, 128, 256) bf16 every row in the last "
                    "group, two steps in every sum"),
    pytest.param(8192, 1024, 1024, 8, (512, 512, 512), "random", "bfloat16",
                 id="M=8192 K=N=1024 E=8 bf16-tpu", marks=on_tpu),
])
def test_differentiable(M, K, N, E, tiling, pattern, dtype, rng):
    """jax.vjp of ragged_dot: the output and both gradients right, from three kernels
    (gmm forward; gmm and tgmm backward), each held to its own puzzle: its grid and
    blocks, the work of its real visits only, and the bytes they move."""
    tm, tk, tn = shrunk(tiling, M, K, N)
    sizes = group_sizes(rng, M, E, pattern, 8)
    lhs, rhs, grad = summed(rng, dtype, (M, K), (E, K, N), (M, N))
    ran = measure(with_grads, lhs, rhs, sizes, grad, attend=ragged_dot.ragged_dot,
                  tiling=tiling, structure=GROUPED.where(kernels=3,
                                                         outside={"metadata", "transpose"}))
    kernels, comes_from = lesson.vjp_kernels(ran, {"lhs": lhs, "rhs": rhs, "grad": grad})
    visits = cdiv(M, tm) + E - 1
    grids = {"output": (cdiv(N, tn), visits, cdiv(K, tk)),
             "d lhs": (cdiv(K, tk), visits, cdiv(N, tn)),
             "d rhs": (cdiv(N, tn), cdiv(K, tk), visits)}
    for output, site in kernels.items():
        lesson.check_vjp_structure(output, site, comes_from, grid=grids[output],
                                   sizes={"M": M, "K": K, "N": N, "E": E},
                                   tiles={"M": tm, "K": tk, "N": tn, "E": None})
    out, d_lhs, d_rhs = ran.output
    tolerance = exact_for(dtype)
    check(out, grouped_matmul(lhs, rhs, sizes).astype(dtype), name="output",
          blocks=(tm, tn), axes="M N", tolerance=tolerance)
    check(d_lhs, grouped_matmul(grad, np.swapaxes(rhs, 1, 2), sizes).astype(dtype),
          name="d lhs", blocks=(tm, tk), axes="M K", tolerance=tolerance,
          likely={"d_lhs_first_expert": lambda: (f64(grad)[0] @ f64(rhs)[0][0].T)
                  .astype(dtype),
                  **({"d_lhs_rhs_not_transposed": lambda: grouped_matmul(grad, rhs, sizes)
                      .astype(dtype)} if K == N else {})})
    expected = transposed_grouped_matmul(np.swapaxes(lhs, 0, 1), grad, sizes)
    lesson.check_experts_written(d_rhs, expected.astype(dtype), sizes, blocks=(tk, tn),
                                 tolerance=tolerance, name="d rhs",
                                 stored=lesson.stored_blocks(ran, kernels["d rhs"]))
    check(d_rhs, expected.astype(dtype), name="d rhs", blocks=(1, tk, tn), axes="E K N",
          tolerance=tolerance,
          likely={"d_rhs_every_row": lambda: np.broadcast_to(
              f64(lhs)[0].T @ f64(grad)[0], (E, K, N)).astype(dtype),
                  **({"d_rhs_operands_swapped": lambda: np.swapaxes(expected, 1, 2)
                      .astype(dtype)} if K == N else {})})
    if tpu_sized():
        return
    itemsize = lhs.dtype.itemsize
    counts = {"output": (lesson.dot_flops(sizes, M, K, N, tm, tk, tn),
                         lesson.gmm_bytes(M, K, N, E, sizes, tm, tk, tn, itemsize)),
              "d lhs": (lesson.dot_flops(sizes, M, N, K, tm, tn, tk),
                        lesson.gmm_bytes(M, N, K, E, sizes, tm, tn, tk, itemsize)),
              "d rhs": (lesson.dot_flops(sizes, M, K, N, tm, tk, tn),
                        lesson.tgmm_bytes(M, K, N, E, sizes, tm, tk, tn, itemsize))}
    for output in ("output", "d lhs", "d rhs"):
        flops, moved = counts[output]
        lesson.check_vjp_counts(ran, output, kernels[output], flops=flops, moved=moved)
    # The kernels' own DMAs, if any, and every output written: all three together.
    check_traffic(ran, reference=sum(moved[0] for _, moved in counts.values()),
                  minimum=sum(moved[1] for _, moved in counts.values()))
    lowers_for_tpu(ran)
