"""Tests for exercises/basics.py. Run them, don't edit them:

    pytest exercises/test_basics.py              # all puzzles of the chapter
    pytest exercises/test_basics.py -k tiled     # one puzzle
    pytest exercises/test_basics.py -k tiled --hint

Each test compares your kernel with plain JAX on at least two shapes (one an
edge case: a single block, or a size the block does not divide), then checks
that it would compile for a real TPU. Tests marked `tpu` run bigger shapes on
a real TPU and are skipped elsewhere.
"""
import jax
import numpy as np
import pytest

from pytest_pallas_hints import (Structure, cdiv, chapter, check, check_traffic, lowers_for_tpu,
                                 measure)

basics = chapter("basics")

puzzle = pytest.mark.puzzle
on_tpu = pytest.mark.tpu


# What each lesson requires of your program, checked from its trace: one
# pallas_call (your own) does the work; nothing but reshapes happens around it
# unless listed in `outside`; where the lesson is the grid, the grid and blocks.
ELEMENTWISE = Structure(inside={"add"})


# 1 -------------------------------------------------------------------------
@puzzle("basics.add_one")
@pytest.mark.parametrize("M, D, dtype", [
    pytest.param(8, 128, "float32", id="M=8 D=128"),
    pytest.param(3, 5, "bfloat16", id="M=3 D=5 bf16 (odd shape)"),
    pytest.param(512, 1024, "float32", id="M=512 D=1024-tpu", marks=on_tpu),
])
def test_add_one(M, D, dtype, rng):
    x = rng.normal((M, D), dtype)
    ran = measure(basics.add_one, x, structure=ELEMENTWISE)
    check(ran, x + 1)
    lowers_for_tpu(ran)


# 2 -------------------------------------------------------------------------
@puzzle("basics.tiled")
@pytest.mark.parametrize("M, D, bm", [
    pytest.param(32, 128, 8, id="M=32 D=128 bm=8"),
    pytest.param(17, 256, 8, id="M=17 D=256 bm=8 (one row past the blocks)"),
    pytest.param(4096, 512, 256, id="M=4096 D=512 bm=256-tpu", marks=on_tpu),
])
def test_tiled(M, D, bm, rng):
    x = rng.normal((M, D))
    ran = measure(basics.add_one_tiled, x, bm=bm, structure=ELEMENTWISE.where(
        grid=(cdiv(M, bm),), blocks={"x": (bm, D), "output": (bm, D)}))
    check(ran, x + 1, blocks=(bm, None), axes="i -")
    lowers_for_tpu(ran)


# 3 -------------------------------------------------------------------------
@puzzle("basics.reverse")
@pytest.mark.parametrize("M, D, bm", [
    pytest.param(32, 128, 8, id="M=32 D=128 bm=8"),
    pytest.param(8, 128, 8, id="M=8 D=128 bm=8 (one block)"),
    pytest.param(4096, 512, 256, id="M=4096 D=512 bm=256-tpu", marks=on_tpu),
])
def test_reverse(M, D, bm, rng):
    x = rng.normal((M, D))
    expected = x.reshape(M // bm, bm, D)[::-1].reshape(M, D)
    ran = measure(basics.reverse_blocks, x, bm=bm, structure=Structure(
        grid=(M // bm,), blocks={"x": (bm, D), "output": (bm, D)}))
    check(ran, expected, blocks=(bm, None), axes="i -",
          likely={"rows_reversed": x[::-1], "unchanged": x})
    lowers_for_tpu(ran)


# 4 -------------------------------------------------------------------------
@puzzle("basics.grid_2d")
@pytest.mark.parametrize("M, N, bm, bn", [
    pytest.param(17, 257, 8, 128, id="M=17 N=257 bm=8 bn=128 (partial blocks both ways)"),
    pytest.param(24, 256, 8, 256, id="M=24 N=256 bm=8 bn=256 (one column block)"),
    pytest.param(2048, 2048, 256, 512, id="M=N=2048-tpu", marks=on_tpu),
])
def test_grid_2d(M, N, bm, bn, rng):
    x, y = rng.normal((M, N)), rng.normal((M, N))
    ran = measure(basics.add_2d, x, y, bm=bm, bn=bn, structure=ELEMENTWISE.where(
        grid=(cdiv(M, bm), cdiv(N, bn)), blocks={"x": (bm, bn), "y": (bm, bn), "output": (bm, bn)}))
    check(ran, x + y, blocks=(bm, bn), axes="i j")
    lowers_for_tpu(ran)


# 5 -------------------------------------------------------------------------
@puzzle("basics.outer_add")
@pytest.mark.parametrize("M, N, bm, bn", [
    pytest.param(16, 384, 8, 128, id="M=16 N=384 bm=8 bn=128"),
    pytest.param(17, 257, 8, 128, id="M=17 N=257 bm=8 bn=128 (partial blocks both ways)"),
    pytest.param(2048, 2048, 256, 512, id="M=N=2048-tpu", marks=on_tpu),
])
def test_outer_add(M, N, bm, bn, rng):
    x, y = rng.normal((M, 1)), rng.normal((1, N))

    def y_follows_rows():  # y's block picked by the row index i instead of j
        i, j = np.arange(M)[:, None] // bm, np.arange(N)[None, :] % bn
        return x + y[0, np.clip(i * bn + j, 0, N - 1)]

    ran = measure(basics.outer_add, x, y, bm=bm, bn=bn, structure=ELEMENTWISE.where(
        grid=(cdiv(M, bm), cdiv(N, bn)), blocks={"x": (bm, 1), "y": (1, bn), "output": (bm, bn)}))
    check(ran, x + y, blocks=(bm, bn), axes="i j", likely={"y_follows_rows": y_follows_rows})
    lowers_for_tpu(ran)


# 6 -------------------------------------------------------------------------
@puzzle("basics.tail")
@pytest.mark.parametrize("M, D, bm", [
    pytest.param(17, 128, 8, id="M=17 D=128 bm=8 (1 row past the blocks)"),
    pytest.param(5, 256, 8, id="M=5 D=256 bm=8 (one partial block)"),
    pytest.param(8, 128, 8, id="M=8 D=128 bm=8 (one whole block: no tail)"),
    pytest.param(5000, 512, 256, id="M=5000 D=512 bm=256-tpu", marks=on_tpu),
])
def test_tail(M, D, bm, rng):
    x = rng.normal((M, D))
    ran = measure(basics.column_sums, x, bm=bm, structure=Structure(
        inside={"reduce_sum", "select_n"}, outside={"reduce_sum"},  # the PROVIDED wrapper's sum
        grid=(cdiv(M, bm),), blocks={"x": (bm, D)}))
    check(ran, x.sum(axis=0), tolerance=1e-4)
    lowers_for_tpu(ran)


# 7 -------------------------------------------------------------------------
@puzzle("basics.row_sum")
@pytest.mark.parametrize("M, N, bm, bn", [
    pytest.param(17, 512, 8, 128, id="M=17 N=512 bm=8 bn=128 (a partial row block)"),
    pytest.param(8, 128, 8, 128, id="M=8 N=128 (one block)"),
    pytest.param(1024, 8192, 256, 1024, id="M=1024 N=8192-tpu", marks=on_tpu),
])
def test_row_sum(M, N, bm, bn, rng):
    x = rng.normal((M, N))
    ran = measure(basics.row_sum, x, bm=bm, bn=bn, structure=Structure(
        inside={"reduce_sum"}, outside={"slice"}, grid=(cdiv(M, bm), N // bn),
        blocks={"x": (bm, bn)}))
    check(ran, x.sum(axis=1), blocks=(bm,), axes="i", tolerance=1e-4,
          likely={"last_block_only": lambda: x[:, -bn:].sum(axis=1),
                  "first_block_twice": lambda: x.sum(axis=1) + x[:, :bn].sum(axis=1)})
    lowers_for_tpu(ran)


# 8 -------------------------------------------------------------------------
FUSED = Structure(inside={"add", "tanh"})


@puzzle("basics.bias_gelu")
@pytest.mark.parametrize("M, D, bm, dtype", [
    pytest.param(32, 256, 8, "float32", id="M=32 D=256 bm=8"),
    pytest.param(17, 128, 8, "bfloat16", id="M=17 D=128 bm=8 bf16 (one row past the blocks)"),
    pytest.param(4096, 1024, 256, "bfloat16", id="M=4096 D=1024 bf16-tpu", marks=on_tpu),
])
def test_bias_gelu(M, D, bm, dtype, rng):
    x, b = rng.normal((M, D), dtype), rng.normal((D,), dtype)
    gelu = jax.jit(lambda v, approximate=True: jax.nn.gelu(
        v.astype("float32"), approximate=approximate).astype(dtype), static_argnums=1)
    ran = measure(basics.bias_gelu, x, b, bm=bm, structure=FUSED.where(grid=(cdiv(M, bm),)))
    check(ran, gelu(x + b), blocks=(bm, None), axes="i -",
          likely={"bias_missing": lambda: gelu(x), "exact_gelu": lambda: gelu(x + b, False),
                  "bias_after_gelu": lambda: (gelu(x).astype("float32") + b.astype("float32"))
                  .astype(dtype)})
    lowers_for_tpu(ran)


@puzzle("basics.bias_gelu")
def test_bias_gelu_is_one_pass_over_memory(rng):
    """Fused: x and b read once, the output written once, nothing else (in bf16, so
    that a cast outside the kernel counts too)."""
    M, D, bm = 32, 256, 8
    x, b = rng.normal((M, D), "bfloat16"), rng.normal((D,), "bfloat16")
    minimum = x.nbytes + b.nbytes + x.nbytes
    check_traffic(measure(basics.bias_gelu, x, b, bm=bm, structure=FUSED), reference=minimum,
                  minimum=minimum, outside=0)


# 9 -------------------------------------------------------------------------
@puzzle("basics.outer_relu_grad")
@pytest.mark.parametrize("M, N, bm, bn", [
    pytest.param(16, 384, 8, 128, id="M=16 N=384 bm=8 bn=128"),
    pytest.param(8, 128, 8, 128, id="M=8 N=128 (one block)"),
    pytest.param(2048, 2048, 256, 512, id="M=N=2048-tpu", marks=on_tpu),
])
def test_outer_relu_grad(M, N, bm, bn, rng):
    x, y, g = rng.normal((M, 1)), rng.normal((1, N)), rng.normal((M, N))
    x[::3], y[:, ::5] = 0, 0  # relu's gradient at 0 is 0, as jax.nn.relu's: x * y > 0, not >= 0
    upstream = g * (x * y > 0)  # relu passes the gradient where x*y > 0 (jax.nn.relu's rule)
    expected_dx = (upstream * y).sum(1, keepdims=True, dtype=np.float64).astype(np.float32)
    expected_dy = (upstream * x).sum(0, keepdims=True, dtype=np.float64).astype(np.float32)
    ran = measure(basics.outer_relu_grad, x, y, g, bm=bm, bn=bn, structure=Structure(
        kernels=2, inside={"reduce_sum", "select_n"},
        grid=[(M // bm, N // bn), (N // bn, M // bm)]))
    dx, dy = ran.output
    check(dx, expected_dx, name="dx", blocks=(bm, None), axes="i -", tolerance=1e-4,
          likely={"relu_ignored": lambda: (g * y).sum(1, keepdims=True),
                  "relu_open_at_zero": lambda: (g * (x * y >= 0) * y).sum(1, keepdims=True)})
    check(dy, expected_dy, name="dy", blocks=(None, bn), axes="- j", tolerance=1e-4,
          likely={"relu_ignored": lambda: (g * x).sum(0, keepdims=True),
                  "relu_open_at_zero": lambda: (g * (x * y >= 0) * x).sum(0, keepdims=True)})
    lowers_for_tpu(ran)
