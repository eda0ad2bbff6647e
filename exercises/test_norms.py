"""Tests for exercises/norms.py. Run them, don't edit them:

    pytest exercises/test_norms.py                    # all puzzles of the chapter
    pytest exercises/test_norms.py -k long_rows       # one puzzle
    pytest exercises/test_norms.py -k long_rows --hint

Every test compares your kernels with the same function computed in float64 NumPy,
on at least two shapes (one an edge case: rows or columns the block does not divide,
a single block, bfloat16), forward and, where the puzzle is a backward, every
gradient through jax.vjp. Then it counts what your kernels did: the bytes they
moved between HBM and VMEM (a row kernel reads its input once and writes its output
once), the VMEM they took where a row must never be whole in it, and for the loss
the dots they executed and every array of the program (no [T, V] array may exist
outside VMEM). Last, it checks that the kernels would compile for a real TPU.
Tests marked `tpu` run realistic sizes on a real TPU and are skipped elsewhere.

The bfloat16 configurations of the running-statistics puzzles are long (many
column or vocabulary blocks, with a long tail of small terms): a statistic kept in
bfloat16 drops that tail and fails on its values, besides the precision rule. Where a
bfloat16 output comes straight from the statistics (a softmax, RMSNorm's y), each of
its values must be the exact one rounded once: what float32 until the store gives.
The differentiable puzzles also check what the forward saves for the backward, and
that the chapter's functions refuse bad arguments with a ValueError naming them.
"""
import jax.numpy as jnp
import numpy as np
import pytest

from pytest_pallas_hints import (Structure, cdiv, chapter, check_blocks, check_rejects,
                                 check_traffic, check_vmem, check_work, lowers_for_tpu, measure,
                                 tpu_sized)
from pytest_pallas_hints.lessons import norms as lesson

norms = chapter("norms")

puzzle = pytest.mark.puzzle
on_tpu = pytest.mark.tpu

# What each lesson requires of your program, checked from its trace: your own
# kernels compute the statistics (the max, the sums, the exp); nothing but reshapes
# happens around them.
SOFTMAX = Structure(inside={"reduce_max", "reduce_sum", "exp"})
NORM = Structure(inside={"reduce_sum"})
XENT = Structure(inside={"dot_general", "reduce_max", "exp"})


# --- the expected values, in float64 NumPy -----------------------------------------

def softmax64(x):
    x, = lesson.f64(x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def rms64(x, scale, dy, eps):
    """y, dx, dscale of RMSNorm, and the pieces the likely wrong answers need."""
    x, scale, dy = lesson.f64(x, scale, dy)
    ms = (x * x).mean(axis=1, keepdims=True)
    inv_rms = 1 / np.sqrt(ms + eps)
    x_hat = x * inv_rms
    g = dy * scale
    dx = inv_rms * (g - x_hat * (g * x_hat).mean(axis=1, keepdims=True))
    return dict(y=x_hat * scale, inv_rms=inv_rms, dx=dx, dscale=(dy * x_hat).sum(axis=0),
                ms=ms, g=g, x_hat=x_hat)


def near_constant(x, dy=None, *, row=3, offset=0.0, rng):
    """Makes one row of x nearly constant (offset plus noise of 1e-4, a variance of
    1e-8, far below every eps of these tests), where eps decides 1 / std: rsqrt(var +
    eps) is eps ** -0.5, and a 1 / (sqrt(var) + eps) is 10 to 30 times larger. Every
    other row has a variance near 1, where eps changes nothing the checks can see.
    That row's dy shrinks by as much as its 1 / std grows, so that its dx is as large
    as the others' (a tolerance is relative to the largest value)."""
    x[row] = (offset + 1e-4 * rng.normal((x.shape[1],))).astype(x.dtype)
    if dy is not None:
        dy[row] = (dy[row].astype(np.float32) * 1e-3).astype(dy.dtype)
    return x


# 1 -------------------------------------------------------------------------
@puzzle("norms.row_softmax")
@pytest.mark.parametrize("R, C, block_rows, dtype, scale", [
    pytest.param(17, 384, 8, "float32", 100.0,
                 id="R=17 C=384 block_rows=8 logits up to ~400 (the last block 1 row)"),
    pytest.param(16, 1000, 16, "bfloat16", 3.0,
                 id="R=16 C=1000 block_rows=16 bf16 (one block, C not a multiple of 128)"),
    pytest.param(4096, 8192, 16, "bfloat16", 3.0, id="R=4096 C=8192 bf16-tpu", marks=on_tpu),
])
def test_row_softmax(R, C, block_rows, dtype, scale, rng):
    x = rng.normal((R, C), dtype, scale=scale)
    ran = measure(norms.softmax_rows, x, block_rows=block_rows,
                  structure=SOFTMAX.where(grid=(cdiv(R, block_rows),)))
    check_blocks(ran, x=(block_rows, C))
    expected = softmax64(x)

    def unnormalised():
        x64, = lesson.f64(x)
        return np.exp(x64 - x64.max(axis=1, keepdims=True)).astype(dtype)

    lesson.check_values(ran, ran, expected.astype(dtype), blocks=(block_rows, None), axes="R C",
                        sums=True, likely={"unnormalised": unnormalised})
    if dtype == "bfloat16":
        lesson.check_rounded_once(ran.output, expected)
    if tpu_sized():
        return
    check_traffic(ran, reference=2 * x.nbytes, minimum=2 * x.nbytes)
    lowers_for_tpu(ran)


# 2 -------------------------------------------------------------------------
def long_tail(rng, R, C, block_cols, dtype):
    """Rows whose mass sits in one of the first three column blocks (zeros, and one
    column per row between 0.1 and 0.4, the row's max: a block sum near 100, not a
    whole number) and a long tail of small terms in the others (near -6.3, each block
    adding about 0.2 to the sum). A float32 running sum keeps the tail; a bfloat16 one
    (8 significant bits: near 100 a step is 0.5, and 100 + 0.2 is 100) rounds every
    block's share of it away, and the softmax comes out 3% too large. A block's sum
    rounded to bfloat16 before it joins a float32 one is off by up to 0.25%: too little
    for the value check, enough for the rounded-once check."""
    x = rng.normal((R, C), scale=0.3) - 6.3
    j = int(rng.integers((), 0, 3))
    mass = np.zeros((R, block_cols))
    mass[np.arange(R), rng.integers((R,), 0, block_cols)] = rng.uniform((R,), 0.1, 0.4)
    x[:, j * block_cols:(j + 1) * block_cols] = mass
    return x.astype(jnp.dtype(dtype))


@puzzle("norms.long_rows")
@pytest.mark.parametrize("R, C, block_rows, block_cols, dtype, rising", [
    pytest.param(17, 1025, 8, 128, "float32", False,
                 id="R=17 C=1025 block_rows=8 block_cols=128 (9 column blocks, the last 1 wide)"),
    pytest.param(16, 2048, 16, 128, "bfloat16", False,
                 id="R=16 C=2048 block_cols=128 bf16 (16 column blocks, a long tail of small terms)"),
    pytest.param(8, 384, 8, 128, "float32", True,
                 id="R=8 C=384 float32, the last column block over 100 above the first"),
    pytest.param(2048, 65536, 16, 2048, "bfloat16", False, id="R=2048 C=65536 bf16-tpu",
                 marks=on_tpu),
])
def test_long_rows(R, C, block_rows, block_cols, dtype, rising, rng):
    """Right values; the row never whole in VMEM; x read twice (one read per pass) and
    the output written once. ``rising``: a later block's logits exceed the first block's
    by more than exp's float32 range (88): the running max must move, and the sum be
    rescaled."""
    if rising:
        x = rng.normal((R, C), dtype)
        x[:, -block_cols:] += 110
    elif dtype == "float32":
        # The running max moves from block to block, and each row's largest logit sits
        # in its last column, alone in the last column block. Rows sit hundreds above
        # or below zero, as logits do: exp without the max subtracted overflows or
        # vanishes there.
        x = rng.normal((R, C), dtype, scale=3.0) + np.linspace(-300, 300, R,
                                                               dtype=dtype)[:, None]
        x[:, -1] = x.max(axis=1) + 1
    else:
        x = long_tail(rng, R, C, block_cols, dtype)
    ran = measure(norms.softmax_long, x, block_rows=block_rows, block_cols=block_cols,
                  structure=SOFTMAX.where(grid=(cdiv(R, block_rows), 2, cdiv(C, block_cols))))
    check_blocks(ran, x=(block_rows, block_cols))
    lesson.check_not_all_inf(ran.output, x, ran)
    # bf16 outputs: the final rounding costs at most 0.4%; a bf16 statistic costs 3%.
    expected = softmax64(x)
    lesson.check_values(
          ran, ran, expected.astype(dtype), blocks=(block_rows, block_cols), axes="R C",
          tolerance=None if dtype == "float32" else 1e-2, tail=C % block_cols != 0, sums=True,
          likely={"l_not_rescaled": lambda: lesson.online64(
                      x, block_cols, rescale=False).astype(dtype),
                  "last_block_statistics": lambda: lesson.online64(
                      x, block_cols, reset=True).astype(dtype)})
    if dtype == "bfloat16":
        lesson.check_rounded_once(ran.output, expected)
    if tpu_sized():
        return
    check_vmem(ran, most=lesson.long_rows_vmem(block_rows, block_cols, x.itemsize), why=(
        "a row is never whole in VMEM: one (block_rows, block_cols) block of x and one of "
        "the output at a time, and a few numbers per row for the statistics."))
    check_traffic(ran, reference=3 * x.nbytes, minimum=2 * x.nbytes)
    lowers_for_tpu(ran)


# 3 -------------------------------------------------------------------------
@puzzle("norms.softmax_grad")
@pytest.mark.parametrize("R, C, block_rows, block_cols, dtype, common", [
    pytest.param(12, 640, 16, None, "float32", 0.0,
                 id="R=12 C=640 block_rows=16 whole rows (one block: block_rows shrinks to R)"),
    # dy = 64 + noise: dx does not depend on a part common to the row (y sums to 1),
    # so the row sum of dy * y is 64 plus a small part, which bf16 (a step of 0.5
    # near 64) would round away.
    pytest.param(17, 1025, 16, 256, "bfloat16", 64.0,
                 id="R=17 C=1025 block_rows=16 block_cols=256 bf16 (tails of 1 row, 1 column, "
                    "dy near 64)"),
    pytest.param(2048, 32768, 16, 2048, "bfloat16", 0.0, id="R=2048 C=32768 bf16-tpu",
                 marks=on_tpu),
])
def test_softmax_grad(R, C, block_rows, block_cols, dtype, common, rng):
    """jax.vjp of softmax: y and dx right, from two kernels of yours (the forward and
    the backward), each reading its inputs once per pass."""
    x = rng.normal((R, C), dtype, scale=3.0)
    dy = (rng.normal((R, C)) + common).astype(jnp.dtype(dtype))
    # The forward is puzzle 1's or puzzle 2's; the backward walks puzzle 2's grid, with a
    # single column block for whole rows.
    # A block larger than the array shrinks to it.
    rows, cols = min(block_rows, R), min(block_cols or C, C)
    two_passes = (cdiv(R, rows), 2, cdiv(C, cols))
    forward_grid = (cdiv(R, rows),) if block_cols is None else two_passes
    saved = lesson.Saved()
    ran = measure(lesson.with_grads(norms.softmax, "x dy", saved=saved), x, dy,
                  block_rows=block_rows, block_cols=block_cols,
                  structure=SOFTMAX.where(kernels=2, inside={"exp", "reduce_sum", "mul"},
                                          grid=[forward_grid, two_passes]))
    check_blocks(ran, x=(rows, cols), dy=(rows, cols))
    y, dx = ran.output
    p = softmax64(x)
    dy64, x64 = lesson.f64(dy, x)
    lesson.check_values(ran, y, p.astype(dtype), name="y", blocks=(rows, cols), axes="R C",
                        sums=True)
    lesson.check_alone(norms.softmax, x, like=x, block_rows=block_rows, block_cols=block_cols)

    def dx_of(y):
        return lambda: (y * (dy64 - (dy64 * y).sum(axis=1, keepdims=True))).astype(dtype)

    # The backward is handed y as the forward stored it (rounded to bf16 for bf16 rows):
    # dx is computed from that y, in float32 until the store.
    lesson.check_values(
          ran, dx, dx_of(lesson.f64(y)[0])(), name="dx", blocks=(rows, cols), axes="R C",
          tail=C % cols != 0, sums=True,
          likely={"given_x": dx_of(x64), "no_row_sum": lambda: (p * dy64).astype(dtype),
                  "sign_flipped": lambda: -dx_of(p)()})
    saved.check(rows=R * C, most=1, why=(
        "the backward needs y, the forward's own output, and dy, which it is handed."))
    if tpu_sized():
        return
    reference, minimum = lesson.softmax_grad_bytes(x, passes=1 if block_cols is None else 2)
    check_traffic(ran, reference=reference, minimum=minimum)
    lowers_for_tpu(ran)


@puzzle("norms.softmax_grad")
def test_softmax_grad_rejects_bad_arguments():
    """softmax checks its arguments up front: a ValueError naming the one at fault."""
    x = np.zeros((16, 256), np.float32)
    check_rejects(norms.softmax, [
        ("x must be 2-D", (np.zeros((2, 16, 256), np.float32),), {}, ["x"]),
        ("x must be floating", (np.zeros((16, 256), np.int32),), {}, ["x"]),
        ("block_rows must be a positive multiple of 8", (x,), {"block_rows": 12},
         ["block_rows"]),
        ("block_cols must be a positive multiple of 128", (x,), {"block_cols": 100},
         ["block_cols"]),
    ])


# 4 -------------------------------------------------------------------------
@puzzle("norms.rms_forward")
@pytest.mark.parametrize("R, D, block_rows, dtype, eps", [
    pytest.param(17, 384, 8, "float32", 1e-2,
                 id="R=17 D=384 block_rows=8 eps=0.01 (the last block 1 row)"),
    pytest.param(16, 1000, 16, "bfloat16", 1e-6,
                 id="R=16 D=1000 block_rows=16 bf16 (one block)"),
    pytest.param(8192, 4096, 64, "bfloat16", 1e-6, id="R=8192 D=4096 bf16-tpu", marks=on_tpu),
])
def test_rms_forward(R, D, block_rows, dtype, eps, rng):
    """y and the saved 1 / rms right; x read once, y and one float per row written."""
    x = near_constant(rng.normal((R, D), dtype, scale=0.3), rng=rng)   # small rows: eps matters
    scale = rng.normal((D,), dtype)
    ran = measure(norms.rms_norm_forward, x, scale, eps=eps, block_rows=block_rows,
                  structure=NORM.where(grid=(cdiv(R, block_rows),)))
    check_blocks(ran, x=(block_rows, D))
    lesson.check_returns_two(ran.output, "rms_norm_forward", "(y, inv_rms)")
    y, inv_rms = ran.output
    truth = rms64(x, scale, x, eps)
    x64, scale64 = lesson.f64(x, scale)
    lesson.check_values(
        ran, y, truth["y"].astype(dtype), name="y", blocks=(block_rows, None), axes="R D",
        likely={"eps_outside": lambda: (x64 / (np.sqrt(truth["ms"]) + eps) * scale64)
                .astype(dtype),
                "scale_missing": lambda: truth["x_hat"].astype(dtype)})
    lesson.check_saves_one_per_row(inv_rms, x)
    lesson.check_values(
        ran, inv_rms, truth["inv_rms"].astype(np.float32), name="inv_rms",
        blocks=(block_rows, None), axes="R 1",
        likely={"rms_not_inverted": lambda: (1 / truth["inv_rms"]).astype(np.float32)})
    if dtype == "bfloat16":
        lesson.check_rounded_once(y, truth["y"], name="y")
    if tpu_sized():
        return
    moved = lesson.rms_forward_bytes(x, scale)
    check_traffic(ran, reference=moved, minimum=moved)
    lowers_for_tpu(ran)


# 5 -------------------------------------------------------------------------
@puzzle("norms.rms_backward")
@pytest.mark.parametrize("R, D, block_rows, dtype", [
    pytest.param(17, 256, 8, "float32", id="R=17 D=256 block_rows=8 (the last block 1 row)"),
    pytest.param(48, 128, 8, "bfloat16", id="R=48 D=128 block_rows=8 bf16 (6 row blocks)"),
    pytest.param(8192, 4096, 64, "bfloat16", id="R=8192 D=4096 bf16-tpu", marks=on_tpu),
])
def test_rms_backward(R, D, block_rows, dtype, rng):
    """jax.vjp of rms_norm: y, dx and dscale right (dscale summed over every row block),
    from two kernels; the backward reads x, scale, 1 / rms and dy once."""
    x, dy = rng.normal((R, D), dtype), rng.normal((R, D), dtype)
    near_constant(x, dy, rng=rng)
    scale = rng.normal((D,), dtype)
    rows = min(block_rows, R)    # a block longer than the array shrinks to it
    saved = lesson.Saved()
    ran = measure(lesson.with_grads(norms.rms_norm, "x scale dy", saved=saved), x, scale, dy,
                  eps=1e-6, block_rows=block_rows,
                  structure=NORM.where(kernels=2, grid=(cdiv(R, rows),)))
    check_blocks(ran, x=(rows, D))
    y, dx, dscale = ran.output
    truth = rms64(x, scale, dy, 1e-6)
    tolerance = None if dtype == "float32" else 3e-2
    x64, scale64 = lesson.f64(x, scale)
    lesson.check_values(
        ran, y, truth["y"].astype(dtype), name="y", blocks=(rows, None), axes="R D",
        likely={"eps_outside": lambda: (x64 / (np.sqrt(truth["ms"]) + 1e-6) * scale64)
                .astype(dtype)})
    lesson.check_alone(norms.rms_norm, x, scale, like=x, eps=1e-6, block_rows=block_rows)
    lesson.check_values(
        ran, dx, truth["dx"].astype(dtype), name="dx", blocks=(rows, None), axes="R D",
        tolerance=tolerance, likely=lesson.rms_dx_likely(truth, dtype))
    partial = lesson.row_blocks(lesson.f64(dy)[0] * truth["x_hat"], rows)
    lesson.check_values(ran, dscale, truth["dscale"].astype(dtype), name="dscale",
                        tolerance=tolerance, tail=R % rows != 0,
                        likely={"last_block_only": lambda: partial[-1].astype(dtype),
                                "first_block_only": lambda: partial[0].astype(dtype)})
    saved.check(rows=R * D, most=1, why=(
        "x, which the backward reads anyway, scale, and one float per row, 1 / rms. The "
        "normalised rows x * (1 / rms) (or y) are as large as x: written by the forward "
        "and read back by the backward, two more trips over the whole array, for a "
        "product the backward recomputes for free."))
    lesson.check_saved_rows_used(norms.rms_norm, (x, scale), dy, rows=R, eps=1e-6,
                                 block_rows=block_rows)
    if tpu_sized():
        return
    moved = lesson.rms_norm_bytes(x, scale)
    check_traffic(ran, reference=moved, minimum=moved)
    lowers_for_tpu(ran)


@puzzle("norms.rms_backward")
def test_rms_backward_rejects_bad_arguments():
    """rms_norm checks its arguments up front: a ValueError naming the one at fault."""
    x, scale = np.zeros((16, 256), np.float32), np.ones((256,), np.float32)
    check_rejects(norms.rms_norm, [
        ("x must be 2-D", (np.zeros((256,), np.float32), scale), {}, ["x"]),
        ("scale must have shape [D]", (x, np.ones((128,), np.float32)), {}, ["scale"]),
        ("block_rows must be a positive multiple of 8", (x, scale), {"block_rows": 0},
         ["block_rows"]),
    ])


# 6 -------------------------------------------------------------------------
@puzzle("norms.layer_norm")
@pytest.mark.parametrize("R, D, block_rows, dtype, offset", [
    pytest.param(17, 256, 8, "float32", 100.0,
                 id="R=17 D=256 block_rows=8 rows far from zero (mean ~100)"),
    pytest.param(44, 384, 8, "bfloat16", 0.0,
                 id="R=44 D=384 block_rows=8 bf16 (6 row blocks, the last 4 rows)"),
    pytest.param(12, 128, 16, "float32", 0.0,
                 id="R=12 D=128 block_rows=16 (one block: block_rows shrinks to R)"),
    pytest.param(8192, 4096, 64, "bfloat16", 0.0, id="R=8192 D=4096 bf16-tpu", marks=on_tpu),
])
def test_layer_norm(R, D, block_rows, dtype, offset, rng):
    """jax.vjp of layer_norm: y, dx, dscale and dbias right, from two kernels; the
    forward saves two floats per row."""
    x = (rng.normal((R, D)) + offset).astype(jnp.dtype(dtype))
    dy = rng.normal((R, D), dtype)
    if not offset:   # a near-constant row far from zero would lose its noise to rounding
        near_constant(x, dy, rng=rng)
    scale, bias = rng.normal((D,), dtype), rng.normal((D,), dtype)
    rows = min(block_rows, R)
    saved = lesson.Saved()
    ran = measure(lesson.with_grads(norms.layer_norm, "x scale bias dy", saved=saved), x, scale,
                  bias, dy, eps=1e-5, block_rows=block_rows,
                  structure=NORM.where(kernels=2, grid=(cdiv(R, rows),)))
    check_blocks(ran, x=(rows, D))
    y, dx, dscale, dbias = ran.output
    truth = lesson.layer_norm64(x, scale, bias, dy, 1e-5)
    tolerance = None if dtype == "float32" else 3e-2
    lesson.check_values(
        ran, y, truth["y"].astype(dtype), name="y", blocks=(rows, None), axes="R D",
        likely=lesson.layer_norm_y_likely(x, scale, bias, dy, dtype))
    if dtype == "bfloat16":   # the statistics in float32: y is the exact value rounded once
        lesson.check_rounded_once(y, truth["y"], name="y")
    lesson.check_alone(norms.layer_norm, x, scale, bias, like=x, eps=1e-5, block_rows=block_rows)
    lesson.check_values(
        ran, dx, truth["dx"].astype(dtype), name="dx", blocks=(rows, None), axes="R D",
        tolerance=tolerance, likely=lesson.layer_norm_dx_likely(truth, dtype))
    partial = lesson.row_blocks(lesson.f64(dy)[0], rows)
    lesson.check_values(ran, dscale, truth["dscale"].astype(dtype), name="dscale",
                        tolerance=tolerance, tail=R % rows != 0,
                        likely={"dscale_dbias_swapped": lambda: truth["dbias"].astype(dtype)})
    lesson.check_values(ran, dbias, truth["dbias"].astype(dtype), name="dbias",
                        tolerance=tolerance, tail=R % rows != 0, likely={"last_block_only": lambda: partial[-1].astype(dtype),
                  "dscale_dbias_swapped": lambda: truth["dscale"].astype(dtype)})
    saved.check(rows=R * D, most=1, why=(
        "x, which the backward reads anyway, scale, and two floats per row, the mean and "
        "1 / std. Anything else as large as x (the normalised rows, y) is written by the "
        "forward and read back by the backward: two more trips over the whole array, for "
        "values the backward recomputes for free."))
    lesson.check_saved_rows_used(norms.layer_norm, (x, scale, bias), dy, rows=R, eps=1e-5,
                                 block_rows=block_rows)
    if tpu_sized():
        return
    moved = lesson.layer_norm_bytes(x, scale)
    check_traffic(ran, reference=moved, minimum=moved)
    lowers_for_tpu(ran)


@puzzle("norms.layer_norm")
def test_layer_norm_rejects_bad_arguments():
    """layer_norm checks its arguments up front: a ValueError naming the one at fault."""
    x, vector = np.zeros((16, 256), np.float32), np.ones((256,), np.float32)
    short = np.ones((128,), np.float32)
    check_rejects(norms.layer_norm, [
        ("x must be 2-D", (np.zeros((2, 16, 256), np.float32), vector, vector), {}, ["x"]),
        ("scale must have shape [D]", (x, short, vector), {}, ["scale"]),
        ("bias must have shape [D]", (x, vector, short), {}, ["bias"]),
        ("block_rows must be a positive multiple of 8", (x, vector, vector),
         {"block_rows": 12}, ["block_rows"]),
    ])


# 7 and 8 -----------------------------------------------------------------------
def xent_inputs(rng, T, D, V, block_v, dtype, logits):
    """h [T, D], w [D, V], labels [T]. logits="ordinary": a few units from zero.
    "large": magnitudes around 1e4 (a naive
    exp overflows). "long_tail": h's first feature is a constant 1, so w's first row is
    a bias per vocabulary entry: 0 in one vocabulary block, -6 elsewhere. The mass sits
    in that block, and every other block adds a sliver that a float32 sum keeps and a
    bfloat16 one rounds away."""
    labels = rng.integers((T,), 0, V)
    if logits == "ordinary":   # logits of a few units, as a trained model's
        return (rng.normal((T, D), dtype), rng.normal((D, V), dtype, scale=0.3), labels)
    if logits == "large":
        return (rng.normal((T, D), dtype, scale=30.0), rng.normal((D, V), dtype, scale=40.0),
                labels)
    h = rng.normal((T, D), scale=1.0)
    w = rng.normal((D, V), scale=0.02)
    h[:, 0] = 1.0
    j = int(rng.integers((), 0, V // block_v))
    w[0] = -6.0
    w[0, j * block_v:(j + 1) * block_v] = 0.0
    return h.astype(jnp.dtype(dtype)), w.astype(jnp.dtype(dtype)), labels


# 7 -------------------------------------------------------------------------
@puzzle("norms.fused_xent")
@pytest.mark.parametrize("T, D, V, block_t, block_v, dtype, logits", [
    pytest.param(129, 64, 1025, 128, 256, "float32", "large",
                 id="T=129 D=64 V=1025 block_t=128 block_v=256 logits ~1e4 (tails of 1)"),
    # Ordinary logits beside a tail: garbage columns given 0 instead of -inf add
    # exp(0 - m) each to the sum, which logits near 1e4 hide and these do not.
    pytest.param(40, 32, 1000, 16, 256, "float32", "ordinary",
                 id="T=40 D=32 V=1000 block_t=16 block_v=256 ordinary logits (tails of 8 tokens, 232 words)"),
    pytest.param(128, 64, 2048, 128, 128, "bfloat16", "long_tail",
                 id="T=128 D=64 V=2048 block_v=128 bf16 (16 vocabulary blocks, a long tail)"),
    pytest.param(2048, 2048, 65536, 256, 512, "bfloat16", "large",
                 id="T=2048 D=2048 V=65536 bf16-tpu", marks=on_tpu),
])
def test_fused_xent(T, D, V, block_t, block_v, dtype, logits, rng):
    """loss and lse right and finite; one kernel, whose dots are one (block_t, D) x
    (D, block_v) product per (token block, vocabulary block); no [T, V] array outside
    VMEM; h read once, w once per token block."""
    h, w, labels = xent_inputs(rng, T, D, V, block_v, dtype, logits)
    ran = measure(norms.cross_entropy_forward, h, w, labels, block_t=block_t, block_v=block_v,
                  structure=XENT.where(grid=(cdiv(T, block_t), cdiv(V, block_v))))
    check_blocks(ran, h=(block_t, D), w=(D, block_v))
    lesson.check_returns_two(ran.output, "cross_entropy_forward", "(loss, lse)")
    loss, lse = ran.output
    if not tpu_sized():
        lesson.check_reads_all_of_w(ran, w, num_t=cdiv(T, block_t))
    lesson.check_loss_finite(loss, T)
    truth = lesson.xent64(h, w, labels)
    one_block = lesson.vocabulary_block_likely(h, w, labels, block_v=block_v)
    lesson.check_values(ran, loss, truth["loss"].astype(np.float32), name="loss",
                        blocks=(block_t,), axes="T", tail=V % block_v != 0, sums=True,
                        likely=one_block["loss"])
    lesson.check_values(ran, lse, truth["lse"][:, None].astype(np.float32), name="lse",
                        blocks=(block_t, None), axes="T 1", tail=V % block_v != 0,
                        sums=True, likely=one_block["lse"])
    if tpu_sized():
        return
    lesson.check_no_vocabulary_array(ran, T, V)
    check_work(ran, flops=lesson.xent_flops(T, D, V, block_t, block_v, 1))
    check_vmem(ran, most=lesson.fused_xent_vmem(block_t, block_v, D, h.itemsize),
               why=("one block of h and one of w at a time (two buffers each), and a few "
                    "numbers per token: the logits tile is a value, never a buffer."))
    reference, minimum = lesson.fused_xent_bytes(h, w, block_t=block_t)
    check_traffic(ran, reference=reference, minimum=minimum)
    lowers_for_tpu(ran)


# 8 -------------------------------------------------------------------------
@puzzle("norms.xent_backward")
@pytest.mark.parametrize("T, D, V, block_t, block_v, dtype, common", [
    pytest.param(129, 64, 1025, 128, 256, "float32", 0.0,
                 id="T=129 D=64 V=1025 block_t=128 block_v=256 (tails of 1 token, 1 word)"),
    # Every logit of a token shares a part of 128 (h's first feature is 128, w's first
    # row 1), which the softmax cancels: in bf16 a logit near 128 is a whole number.
    pytest.param(256, 128, 640, 128, 128, "bfloat16", 128.0,
                 id="T=256 D=128 V=640 block_v=128 bf16 (logits near 128)"),
    pytest.param(2048, 2048, 16384, 256, 512, "bfloat16", 0.0,
                 id="T=2048 D=2048 V=16384 bf16-tpu", marks=on_tpu),
])
def test_xent_backward(T, D, V, block_t, block_v, dtype, common, rng):
    """jax.vjp of cross_entropy: the loss, dh and dw right, from three kernels (the
    forward, dh, dw) that recompute the logits block by block: no [T, V] array outside
    VMEM, and the dots of five products per (token block, vocabulary block) pair."""
    labels = rng.integers((T,), 0, V)
    h = rng.normal((T, D), dtype)
    w = rng.normal((D, V), dtype, scale=0.3)
    if common:
        h[:, 0], w[0] = common, 1.0
    dloss = rng.normal((T,), "float32")
    ran = measure(lesson.with_grads(norms.cross_entropy, "h w dloss"), h, w, dloss, labels=labels,
                  block_t=block_t, block_v=block_v,
                  structure=XENT.where(kernels=3))
    lesson.check_xent_grids(ran, num_t=cdiv(T, block_t), num_v=cdiv(V, block_v))
    check_blocks(ran, h=(block_t, D), w=(D, block_v))
    loss, dh, dw = ran.output
    truth = lesson.xent64(h, w, labels, dloss)
    tolerance = 1e-4 if dtype == "float32" else 3e-2
    lesson.check_values(
        ran, loss, truth["loss"].astype(np.float32), name="loss", blocks=(block_t,), axes="T",
        tolerance=1e-4)
    lesson.check_alone(norms.cross_entropy, h, w, like=truth["loss"].astype(np.float32),
                labels=labels, block_t=block_t, block_v=block_v)
    wrong = lesson.xent_grads_likely(h, w, truth, dtype, labels, dloss)
    lesson.check_values(ran, dh, truth["dh"].astype(dtype), name="dh", blocks=(block_t, None),
                        axes="T D", tolerance=tolerance, tail=V % block_v != 0,
                        likely=wrong["dh"])
    lesson.check_values(ran, dw, truth["dw"].astype(dtype), name="dw", blocks=(None, block_v),
                        axes="D V", tolerance=tolerance, tail=T % block_t != 0,
                        likely=wrong["dw"])
    if tpu_sized():
        return
    lesson.check_no_vocabulary_array(ran, T, V)
    # The forward's dot, then the dh kernel's two (logits, dlogits w^T) and the dw
    # kernel's two (logits, h^T dlogits).
    check_work(ran, flops=lesson.xent_flops(T, D, V, block_t, block_v, 5))
    reference, minimum = lesson.xent_backward_bytes(h, w, block_t=block_t, block_v=block_v)
    check_traffic(ran, reference=reference, minimum=minimum)
    lowers_for_tpu(ran)


@puzzle("norms.xent_backward")
def test_xent_backward_rejects_bad_arguments():
    """cross_entropy checks its arguments up front: a ValueError naming the one at fault."""
    T, D, V = 16, 64, 300
    h, w = np.zeros((T, D), np.float32), np.zeros((D, V), np.float32)
    labels = np.zeros((T,), np.int32)
    check_rejects(norms.cross_entropy, [
        ("h must be 2-D", (np.zeros((T * D,), np.float32), w), {"labels": labels}, ["h"]),
        ("w must be [D, V] with h's D", (h, np.zeros((D // 2, V), np.float32)),
         {"labels": labels}, ["w", "h"]),
        ("labels must be integers", (h, w), {"labels": labels.astype(np.float32)},
         ["labels"]),
        ("labels must have shape [T]", (h, w), {"labels": np.zeros((T + 1,), np.int32)},
         ["labels"]),
        ("block_t must be a positive multiple of 8", (h, w),
         {"labels": labels, "block_t": 12}, ["block_t"]),
        ("block_v must be a positive multiple of 128", (h, w),
         {"labels": labels, "block_v": 64}, ["block_v"]),
    ])


@puzzle("norms.xent_backward")
@pytest.mark.parametrize("bad", [
    pytest.param(-1, id="a label of -1"),
    pytest.param(1000, id="a label of V"),
])
def test_xent_backward_rejects_bad_labels(bad, rng):
    """A label outside [0, V) fails up front with a ValueError naming labels, before any
    kernel is built (the labels are concrete here)."""
    T, D, V = 16, 64, 1000
    h, w = rng.normal((T, D)), rng.normal((D, V))
    labels = rng.integers((T,), 0, V)
    labels[3] = bad
    lesson.check_label_refused(norms.cross_entropy, h, w, labels=labels, bad=bad, V=V, block_t=8,
                        block_v=128)
