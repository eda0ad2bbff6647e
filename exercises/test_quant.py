"""Tests for exercises/quant.py. Run them, don't edit them:

    pytest exercises/test_quant.py                 # all puzzles of the chapter
    pytest exercises/test_quant.py -k int4         # one puzzle
    pytest exercises/test_quant.py -k int4 --hint

Each test compares your kernel with NumPy on at least two small shapes (one an edge
case), then checks what the lesson is about: the integer sums are exact (compared with
integer NumPy), the running sum is int32 where the inputs are int8, quantised weights
cross HBM in their stored width (int8, or two 4-bit values per byte) and are never
dequantised there, the convolution reads each input row a bounded number of times
(not once per tap), and every kernel would compile for a real TPU. Tests marked `tpu`
run realistic sizes on a real TPU and are skipped elsewhere.

int8 inputs span the whole range [-127, 127], with rows and columns of the extremes
planted, so that any sum kept in 8 bits overflows. Where the inputs are bf16, they are
small integers and the scales powers of two: every sum is exact in float32, so a right
kernel matches NumPy to the last bit and one that rounds too early cannot hide behind a
tolerance.
"""
import jax
import numpy as np
import pytest

from pytest_pallas_hints import (Structure, cdiv, chapter, check, check_traffic, check_work,
                                 lowers_for_tpu, measure, tpu_sized)
from pytest_pallas_hints.lessons.quant import (
    check_dot_in_x_dtype, check_int32_accumulator, check_int32_zeroed, check_int8_product,
    check_k_padded, check_rows_read, check_scales_at_the_last_step, check_stored_width,
    check_taps_in_float32, check_window_in_vmem, conv, conv_geometry, dequantized, exact,
    int4_mistakes, k_products, near, per_block_scale, raises_naming, summed_in_bf16,
    tile_flops, tiled_bytes, wrap8)

quant = chapter("quant")

puzzle = pytest.mark.puzzle
on_tpu = pytest.mark.tpu

EXACT = 1e-3   # bf16 outputs of exact sums: a right kernel is bit-exact, one bf16 step off is not


# --- int8 inputs ---------------------------------------------------------------

def int8s(rng, shape, *, planted_rows=False, planted_cols=False):
    """Uniform int8 in [-127, 127]; planted: the first row (column) all 127 and the last
    all -127, so that the sums reach K * 127 * 127 and any 8-bit sum overflows."""
    x = rng.integers(shape, -127, 128, dtype="int8")
    if planted_rows:
        x[0], x[-1] = 127, -127
    if planted_cols:
        x[:, 0], x[:, -1] = 127, -127
    return x


# 1 -------------------------------------------------------------------------------
QUANTIZE = Structure(inside={"reduce_max"})


def quantized(x):
    """(q int8, scale f32) as the kernel computes them in float32, and the ratios x / scale
    in float64 (to accept either neighbour where a ratio sits within 1e-4 of a tie)."""
    x32 = np.asarray(x, np.float32)
    amax = np.abs(x32).max(axis=1, keepdims=True)
    scale = np.where(amax > 0, amax / np.float32(127), np.float32(1)).astype(np.float32)
    ratio = x32.astype(np.float64) / scale.astype(np.float64)
    return np.clip(np.round(ratio), -127, 127).astype(np.int8), scale, ratio


@puzzle("quant.quantize")
@pytest.mark.parametrize("R, C, block_rows, dtype", [
    pytest.param(33, 256, 16, "float32",
                 id="R=33 C=256 block_rows=16 (a last block of one row, a row of zeros)"),
    pytest.param(8, 128, 8, "bfloat16", id="R=8 C=128 block_rows=8 bf16 (one block)"),
    pytest.param(4096, 4096, 256, "bfloat16", id="R=C=4096 block_rows=256 bf16-tpu",
                 marks=on_tpu),
])
def test_quantize(R, C, block_rows, dtype, rng):
    """Each row its own scale (rows span four orders of magnitude); one row all zeros;
    every row reaches +127 or -127 at its largest |x|."""
    magnitude = np.exp(rng.uniform((R, 1), -4.0, 4.0, "float64"))
    x = (rng.normal((R, C), "float64") * magnitude).astype(np.dtype(jax.numpy.dtype(dtype)))
    x[R // 2] = 0
    ran = measure(quant.quantize_int8, x, block_rows=block_rows,
                  structure=QUANTIZE.where(grid=(cdiv(R, block_rows),),
                                           blocks={"x": (block_rows, C)}))
    q, scale = ran.output
    expected_q, expected_scale, ratio = quantized(x)
    amax = np.abs(np.asarray(x, np.float32)).max(axis=1, keepdims=True)
    top = np.asarray(x, np.float32).max(axis=1, keepdims=True)   # the max of x, not of |x|
    check(scale, expected_scale, name="scale", blocks=(block_rows, 1), axes="i 1", likely={
        "zero_row_scale": lambda: np.where(amax > 0, expected_scale, 0).astype(np.float32),
        "scale_inverted": lambda: np.where(amax > 0, 127 / np.where(amax > 0, amax, 1),
                                           1).astype(np.float32),
        "scale_not_divided": lambda: np.where(amax > 0, amax, 1).astype(np.float32),
        "scale_per_block": lambda: per_block_scale(amax, block_rows, scale),
        "scale_in_bf16": lambda: np.where(amax > 0, amax / np.float32(127), 1).astype(
            x.dtype).astype(np.float32),
        "max_not_abs": lambda: np.where(top > 0, top / np.float32(127), 1).astype(np.float32)})
    # A ratio within 1e-4 of a tie (k + 0.5) may round either way in float32.
    q = np.asarray(q)
    if q.shape == expected_q.shape:
        tie = np.abs(np.abs(ratio - np.floor(ratio)) - 0.5) < 1e-4
        either = tie & ((q == np.floor(ratio)) | (q == np.ceil(ratio)))
        expected_q = np.where(either, q, expected_q).astype(np.int8)
    check(q, expected_q, name="q", blocks=(block_rows, C), axes="i C", likely={
        "truncated": lambda: near(ratio, q, np.trunc).astype(np.int8),
        "clipped_to_128": lambda: np.clip(np.round(ratio), -128, 127).astype(np.int8)})
    if tpu_sized():
        return
    moved = R * C * (x.itemsize + 1) + R * 4   # x read once; q and scale written once
    check_traffic(ran, reference=moved, minimum=moved)
    lowers_for_tpu(ran)


# 2 -------------------------------------------------------------------------------
def tiled(M, K, N, bm, bk, bn, blocks, outside=("pad",)):
    """A matmul kernel over an (i, j, k) grid, K last (cdiv(K, bk) steps: K padded to
    whole blocks), with these block shapes; nothing but `outside` around it."""
    return Structure(inside={"dot_general"}, outside=frozenset(outside),
                     grid=(cdiv(M, bm), cdiv(N, bn), cdiv(K, bk)), blocks=blocks)


@puzzle("quant.int8_dot")
@pytest.mark.parametrize("M, K, N, bm, bk, bn", [
    pytest.param(33, 384, 129, 32, 128, 128,
                 id="M=33 K=384 N=129 bm=32 bk=bn=128 (tails of one row and column, 3 k steps)"),
    pytest.param(32, 128, 128, 32, 128, 128, id="M=32 K=128 N=128 (one block: k=0 is the last k)"),
    pytest.param(2048, 2048, 2048, 256, 512, 256, id="M=K=N=2048 bm=256 bk=512 bn=256-tpu",
                 marks=on_tpu),
])
def test_int8_dot(M, K, N, bm, bk, bn, rng):
    """Exact against integer NumPy; the running sum int32; each product computed once;
    int8 blocks over HBM as the grid implies."""
    a = int8s(rng, (M, K), planted_rows=True)
    b = int8s(rng, (K, N), planted_cols=True)
    ran = measure(quant.int8_matmul_int32, a, b, bm=bm, bk=bk, bn=bn,
                  structure=tiled(M, K, N, bm, bk, bn, {"a_q": (bm, bk), "b_q": (bk, bn)}, outside=()))
    check_int32_accumulator(ran)
    check_int8_product(ran)
    truth = exact(a, b)
    check_int32_zeroed(ran.output, truth)
    check(ran, truth.astype(np.int32), blocks=(bm, bn), axes="i j", likely={
        "int8_products": lambda: np.sum([wrap8(p) for p in k_products(a, b, bk)],
                                        axis=0).astype(np.int32),
        "int8_accumulator": lambda: wrap8(truth).astype(np.int32),
        "last_k_only": lambda: k_products(a, b, bk)[-1].astype(np.int32),
        "first_k_only": lambda: k_products(a, b, bk)[0].astype(np.int32),
        **({"first_k_dropped": lambda: exact(a[:, bk:], b[bk:]).astype(np.int32)}
           if K > bk else {})})
    if tpu_sized():
        return
    check_work(ran, flops=tile_flops(M, K, N, bm, bn))
    check_traffic(ran, reference=tiled_bytes(M, K, N, bm, bk, bn, a_item=1, b_item=1,
                                             out_item=4),
                  minimum=M * K + K * N + 4 * M * N)
    lowers_for_tpu(ran)


# 3 -------------------------------------------------------------------------------
def scales(rng, shape):
    """Positive per-row or per-column scales over two orders of magnitude, about 1/127."""
    return (np.exp(rng.uniform(shape, -2.3, 2.3, "float64")) / 127).astype(np.float32)


@puzzle("quant.dequant")
@pytest.mark.parametrize("M, K, N, bm", [
    pytest.param(33, 300, 256, 32,
                 id="M=33 K=300 N=256 bm=32 (K not a multiple of bk, a row tile of one row)"),
    pytest.param(32, 128, 129, 128,
                 id="M=32 K=128 N=129 bm=128 (one k step, a column tile of one column)"),
    pytest.param(2048, 4096, 2048, 256, id="M=2048 K=4096 N=2048 bm=256-tpu", marks=on_tpu),
])
def test_dequant(M, K, N, bm, rng):
    """int8_matmul(a_q, a_scale, b_q, b_scale, bm=bm) with bk = bn = 128: the exact integer
    product times a_scale (rows) times b_scale (columns), once, at the last k step."""
    a, b = int8s(rng, (M, K), planted_rows=True), int8s(rng, (K, N), planted_cols=True)
    a_scale, b_scale = scales(rng, (M, 1)), scales(rng, (1, N))
    bm, bk, bn = min(bm, M), min(128, K), min(128, N)
    ran = measure(quant.int8_matmul, a, a_scale, b, b_scale, bm=bm,
                  structure=tiled(M, K, N, bm, bk, bn,
                                  {"a_q": (bm, bk), "a_scale": (bm, 1), "b_q": (bk, bn), "b_scale": (1, bn)}))
    check_int32_accumulator(ran, scales=(a_scale, b_scale))
    check_int8_product(ran)
    check_scales_at_the_last_step(ran, (a_scale, b_scale))
    check_k_padded(ran, [(a, 1, "a_q's columns"), (b, 0, "b_q's rows")])
    truth = exact(a, b).astype(np.float64)
    rows, cols = a_scale.astype(np.float64), b_scale.astype(np.float64)
    whole = K // bk * bk
    if np.shape(ran.output) == truth.shape:
        check_int32_zeroed(np.asarray(ran.output, np.float64) / (rows * cols), truth)

    def b_scale_follows_rows():   # tile (i, j) took the b_scale block of its row block i
        i, j = np.arange(M)[:, None] // bm, np.arange(N)[None, :] % bn
        return (truth * rows * cols[0, np.clip(i * bn + j, 0, N - 1)]).astype(np.float32)

    check(ran, (truth * rows * cols).astype(np.float32), blocks=(bm, bn), axes="i j", likely={
        "scales_missing": lambda: truth.astype(np.float32),
        "a_scale_only": lambda: (truth * rows).astype(np.float32),
        "b_scale_only": lambda: (truth * cols).astype(np.float32),
        "int8_accumulator": lambda: (wrap8(exact(a, b)) * rows * cols).astype(np.float32),
        "k_tail_dropped": lambda: (exact(a[:, :whole], b[:whole]) * rows * cols).astype(
            np.float32),
        "b_scale_follows_rows": b_scale_follows_rows,
        **({"first_k_dropped": lambda: (exact(a[:, bk:], b[bk:]) * rows * cols).astype(
            np.float32)} if K > bk else {})})
    if tpu_sized():
        return
    Kp = cdiv(K, bk) * bk
    check_stored_width(ran, a, 1 if Kp == bk else cdiv(N, bn) * Kp / K, "a_q")
    check_stored_width(ran, b, 1 if Kp == bk and bn >= N else cdiv(M, bm) * Kp / K, "b_q")
    check_traffic(ran, reference=tiled_bytes(M, Kp, N, bm, bk, bn, a_item=1, b_item=1,
                                             out_item=4, row_bytes=4, col_bytes=4),
                  minimum=M * K + K * N + 4 * (M * N + M + N))
    lowers_for_tpu(ran)


@puzzle("quant.dequant")
@pytest.mark.parametrize("bad", [
    pytest.param("a_scale", id="a_scale of shape [M]"),
    pytest.param("b_q", id="b_q of float32"),
    pytest.param("b_scale", id="b_scale of shape [N, 1]"),
])
def test_dequant_checks_its_arguments(bad, rng):
    """Arguments of the wrong dtype or shape fail up front, with a ValueError naming them."""
    a, b = int8s(rng, (32, 128)), int8s(rng, (128, 128))
    a_scale, b_scale = scales(rng, (32, 1)), scales(rng, (1, 128))
    if bad == "a_scale":
        a_scale = a_scale[:, 0]
    elif bad == "b_q":
        b = b.astype(np.float32)
    else:
        b_scale = b_scale.T
    called = (f"int8_matmul(a_q {a.shape} {a.dtype}, a_scale {a_scale.shape}, "
              f"b_q {b.shape} {b.dtype}, b_scale {b_scale.shape})")
    raises_naming(bad, called, quant.int8_matmul, a, a_scale, b, b_scale)


# 4 -------------------------------------------------------------------------------
def small_ints(rng, shape, dtype, high=9):
    """Integers in [0, high) as floats: every sum of their products is exact in float32."""
    return rng.integers(shape, 0, high, dtype=dtype)


def powers_of_two(rng, shape, low=-9, high=-4):
    """Scales 2^e: a product by one is exact, so bf16 outputs are bit-exact."""
    return np.exp2(rng.integers(shape, low, high + 1, dtype="float64")).astype(np.float32)


@puzzle("quant.weight_only")
@pytest.mark.parametrize("M, K, N, bm, bk, dtype", [
    pytest.param(17, 300, 129, 16, 128, "float32",
                 id="M=17 K=300 N=129 bm=16 bk=128 (K not a multiple of bk, tails of one)"),
    pytest.param(16, 1024, 128, 16, 128, "bfloat16",
                 id="M=16 K=1024 N=128 bm=16 bk=128 bf16 (8 k steps, exact)"),
    pytest.param(1024, 4096, 4096, 256, 512, "bfloat16",
                 id="M=1024 K=N=4096 bm=256 bk=512 bf16-tpu", marks=on_tpu),
])
def test_weight_only(M, K, N, bm, bk, dtype, rng):
    """x @ (w_q * w_scale) in x's dtype; w_q crosses HBM as int8.

    In bf16, x holds integers in [0, 9), w_q in [0, 128) and the scales are powers of
    two: the sums grow, every one of them is exact in float32, and only a float32 running
    sum rounded once at the end is exact."""
    if dtype == "bfloat16":
        x = small_ints(rng, (M, K), dtype)
        w = rng.integers((K, N), 0, 128, dtype="int8")
        w_scale = powers_of_two(rng, (1, N))
    else:
        x = rng.normal((M, K), dtype)
        w = int8s(rng, (K, N), planted_cols=True)
        w_scale = scales(rng, (1, N))
    bm, bk, bn = min(bm, M), min(bk, K), min(128, N)
    ran = measure(quant.int8_weight_matmul, x, w, w_scale, bm=bm, bk=bk,
                  structure=tiled(M, K, N, bm, bk, bn, {"x": (bm, bk), "w_q": (bk, bn), "w_scale": (1, bn)}))
    check_dot_in_x_dtype(ran, x, "the int8 block")
    check_k_padded(ran, [(x, 1, "x's columns"), (w, 0, "w_q's rows")])
    x64, w64, s64 = (np.asarray(v, np.float64) for v in (x, w, w_scale))
    whole = K // bk * bk
    out = x.dtype
    check(ran, (x64 @ w64 * s64).astype(out), blocks=(bm, bn), axes="i j",
          tolerance=EXACT if dtype == "bfloat16" else None, likely={
              "scale_missing": lambda: (x64 @ w64).astype(out),
              "scale_twice": lambda: (x64 @ w64 * s64 * s64).astype(out),
              "k_tail_dropped": lambda: (x64[:, :whole] @ w64[:whole] * s64).astype(out),
              "bf16_accumulation": lambda: summed_in_bf16(x64, w64, s64, bk, out),
              **({"first_k_dropped": lambda: (x64[:, bk:] @ w64[bk:] * s64).astype(out)}
                 if K > bk else {})})
    if tpu_sized():
        return
    Kp = cdiv(K, bk) * bk
    w_reads = 1 if Kp == bk and bn >= N else cdiv(M, bm)
    check_stored_width(ran, w, w_reads * Kp / K, "w_q")
    check_work(ran, flops=tile_flops(M, Kp, N, bm, bn))
    check_traffic(ran, reference=tiled_bytes(M, Kp, N, bm, bk, bn, a_item=x.itemsize,
                                             b_item=1, out_item=x.itemsize, col_bytes=4),
                  minimum=(M * K + M * N) * x.itemsize + K * N + 4 * N)
    lowers_for_tpu(ran)


@puzzle("quant.weight_only")
@pytest.mark.parametrize("bad", [
    pytest.param("w_q", id="w_q of float32"),
    pytest.param("w_scale", id="w_scale of shape [N, 1]"),
    pytest.param("bm", id="bm=8 (not a multiple of 16)"),
])
def test_weight_only_checks_its_arguments(bad, rng):
    """Arguments of the wrong dtype or shape fail up front, with a ValueError naming them."""
    x, w = rng.normal((16, 128), "float32"), int8s(rng, (128, 128))
    w_scale, bm = scales(rng, (1, 128)), 16
    if bad == "w_q":
        w = w.astype(np.float32)
    elif bad == "w_scale":
        w_scale = w_scale.T
    else:
        bm = 8
    called = (f"int8_weight_matmul(x {x.shape} {x.dtype}, w_q {w.shape} {w.dtype}, "
              f"w_scale {w_scale.shape}, bm={bm})")
    raises_naming(bad, called, quant.int8_weight_matmul, x, w, w_scale, bm=bm)


# 5 -------------------------------------------------------------------------------
def pack(u):
    """u [K, N] in 0..15 -> int8 [K // 2, N]: row 2i in the low nibble, 2i + 1 in the high."""
    return (u[0::2] | (u[1::2] << 4)).astype(np.uint8).view(np.int8)


@puzzle("quant.int4")
@pytest.mark.parametrize("M, K, N, group_size, bm, dtype", [
    pytest.param(17, 384, 129, 128, 16, "float32",
                 id="M=17 K=384 N=129 group_size=128 bm=16 (3 groups, tails of one)"),
    pytest.param(16, 1024, 128, 128, 16, "bfloat16",
                 id="M=16 K=1024 N=128 group_size=128 bf16 (8 groups, exact)"),
    pytest.param(1024, 4096, 4096, 128, 256, "bfloat16",
                 id="M=1024 K=N=4096 group_size=128 bm=256 bf16-tpu", marks=on_tpu),
])
def test_int4(M, K, N, group_size, bm, dtype, rng):
    """Nibbles unpacked in the kernel, (u - zero) * scale per group, then the matmul;
    the packed bytes cross HBM as they are.

    Column 0 holds only 15s and column 1 only 0s, in both nibbles of every byte. In bf16,
    x holds integers, the zero points are integers and the scales powers of two: every
    sum is exact in float32."""
    groups = K // group_size
    u = rng.integers((K, N), 0, 16, dtype="int64")
    u[:, 0], u[:, 1] = 15, 0
    if dtype == "bfloat16":
        x = small_ints(rng, (M, K), dtype)
        group_scales = powers_of_two(rng, (groups, N))
        zeros = rng.integers((groups, N), 0, 4, dtype="float32")
    else:
        x = rng.normal((M, K), dtype)
        group_scales = rng.uniform((groups, N), 0.005, 0.05)
        zeros = rng.uniform((groups, N), 0.0, 15.0)
    packed = pack(u)
    bm, bn = min(bm, M), min(128, N)
    ran = measure(quant.int4_matmul, x, packed, group_scales, zeros, group_size=group_size,
                  bm=bm, structure=Structure(
                      inside={"dot_general"}, grid=(cdiv(M, bm), cdiv(N, bn), groups),
                      blocks={"x": (bm, group_size), "w_packed": (group_size // 2, bn)}))
    check_dot_in_x_dtype(ran, x, "the unpacked group, w_ref[...],")
    w = dequantized(u, group_scales, zeros, group_size)   # (u - zero) * scale per group
    check(ran, (np.asarray(x, np.float64) @ w).astype(x.dtype), blocks=(bm, bn), axes="i j",
          tolerance=EXACT if dtype == "bfloat16" else 1e-4,
          likely=int4_mistakes(x, u, packed, group_scales, zeros, group_size))
    if tpu_sized():
        return
    # The packed block (k, j) and the group's scales and zeros (k, 0, j) change at every
    # step: read once per row block, unless a single block covers all of them.
    reads = 1 if groups == 1 and bn >= N else cdiv(M, bm)
    check_stored_width(ran, packed, reads, "w_packed")
    check_work(ran, flops=tile_flops(M, K, N, bm, bn))
    x_reads = 1 if groups == 1 else cdiv(N, bn)
    needed = (K * N // 2 + 2 * 4 * groups * N)
    check_traffic(ran, reference=M * K * x.itemsize * x_reads + needed * reads
                  + M * N * x.itemsize,
                  minimum=(M * K + M * N) * x.itemsize + needed)
    lowers_for_tpu(ran)


@puzzle("quant.int4")
@pytest.mark.parametrize("bad", [
    pytest.param("w_packed", id="w_packed of K rows, not K // 2"),
    pytest.param("group_size", id="group_size=96 (does not divide K=256)"),
    pytest.param("zeros", id="zeros of shape [N]"),
])
def test_int4_checks_its_arguments(bad, rng):
    """Arguments of the wrong dtype or shape fail up front, with a ValueError naming them."""
    K, N = 256, 128
    x = rng.normal((16, K), "float32")
    packed = pack(rng.integers((K, N), 0, 16, dtype="int64"))
    group_scales = rng.uniform((2, N), 0.005, 0.05)
    zeros, group_size = rng.uniform((2, N), 0.0, 15.0), 128
    if bad == "w_packed":
        packed = np.concatenate([packed, packed])
    elif bad == "group_size":
        group_size = 96
    else:
        zeros = zeros[0]
    called = (f"int4_matmul(x {x.shape}, w_packed {packed.shape}, scales "
              f"{group_scales.shape}, zeros {zeros.shape}, group_size={group_size})")
    raises_naming(bad, called, quant.int4_matmul, x, packed, group_scales, zeros,
                  group_size=group_size)


# 6 -------------------------------------------------------------------------------
CONV = Structure(inside={"dot_general"}, outside={"pad"})


@puzzle("quant.halo")
@pytest.mark.parametrize("B, H, W, C, F, KH, KW, block_h, dtype", [
    pytest.param(2, 9, 7, 4, 8, 3, 3, 4, "float32",
                 id="B=2 H=9 W=7 C=4 F=8 3x3 block_h=4 (odd sizes, a partial tile)"),
    pytest.param(1, 16, 8, 8, 16, 5, 1, 4, "float32",
                 id="B=1 H=16 W=8 C=8 F=16 5x1 block_h=4 (a filter one column wide)"),
    pytest.param(1, 8, 6, 4, 8, 2, 4, 4, "float32",
                 id="B=1 H=8 W=6 C=4 F=8 2x4 block_h=4 (even filter sides: more padding "
                    "after than before)"),
    pytest.param(1, 8, 8, 16, 16, 3, 3, 8, "bfloat16",
                 id="B=1 H=W=8 C=F=16 3x3 block_h=8 bf16 (one tile, exact)"),
    pytest.param(8, 56, 56, 128, 128, 3, 3, 8, "bfloat16",
                 id="B=8 H=W=56 C=F=128 3x3 block_h=8 bf16-tpu", marks=on_tpu),
])
def test_halo(B, H, W, C, F, KH, KW, block_h, dtype, rng):
    """SAME convolution, stride 1: right values, the taps summed in float32, one dot per tap
    over each tile, each input row read a bounded number of times, a window of rows in VMEM.

    In bf16, x and w hold small integers: every sum is exact in float32, so only taps
    summed in float32 and rounded once, at the store, match NumPy to the last bit."""
    if dtype == "bfloat16":
        x, w = small_ints(rng, (B, H, W, C), dtype), small_ints(rng, (KH, KW, C, F), dtype)
    else:
        x, w = rng.normal((B, H, W, C)), rng.normal((KH, KW, C, F))
    Ho, Wo, tiles, window, Hp, Wp = conv_geometry(H, W, KH, KW, 1, block_h)
    ran = measure(quant.conv2d_rows, x, w, block_h=block_h, structure=CONV.where(
        grid=(B, tiles)))
    check_taps_in_float32(ran)
    def window_by_blocks():   # window i starts at padded row i, not i * block_h: output
        rows = np.arange(H)   # row i * block_h + r is the right output row i + r
        return conv(x, w)[:, rows // block_h + rows % block_h].astype(out)

    def image_0_only():       # every window taken from the first image
        return np.broadcast_to(conv(x[:1], w), (B, H, W, F)).astype(out)

    out = x.dtype
    check(ran, conv(x, w).astype(out), blocks=(1, block_h, None, None),
          axes="B H W F", tolerance=EXACT if dtype == "bfloat16" else 1e-4, likely={
              "kernel_flipped": lambda: conv(x, w, flip=True).astype(out),
              "padded_after_only": lambda: conv(x, w, before=(0, 0)).astype(out),
              **({"more_padding_before": lambda: conv(x, w, before=(KH // 2, KW // 2))
                  .astype(out)} if KH % 2 == 0 or KW % 2 == 0 else {}),
              "window_by_blocks": window_by_blocks,
              "image_0_only": image_0_only})
    if tpu_sized():
        return
    check_rows_read(ran, x, KH, block_h, Hp, Wp)
    check_window_in_vmem(ran, x, w, ran.output, KH, block_h, F, 1, Wp)
    check_work(ran, flops=2 * B * tiles * block_h * W * C * F * KH * KW)
    item = x.itemsize
    windows = item * B * tiles * window * Wp * C     # one window of rows per tile
    check_traffic(ran, reference=windows + item * (w.size + B * H * W * F),
                  minimum=item * (x.size + w.size + B * H * W * F),
                  shares=[(x, windows), (w, item * w.size)])
    lowers_for_tpu(ran)


# 7 -------------------------------------------------------------------------------
@puzzle("quant.strided")
@pytest.mark.parametrize("B, H, W, C, F, KH, stride, block_h, block_f", [
    pytest.param(2, 9, 7, 4, 129, 3, 2, 2, 128,
                 id="B=2 H=9 W=7 C=4 F=129 3x3 stride=2 block_h=2 block_f=128 (a last "
                    "channel block of one)"),
    pytest.param(1, 8, 8, 8, 8, 5, 2, 4, None,
                 id="B=1 H=W=8 C=F=8 5x5 stride=2 block_h=4 (even sizes, one tile)"),
    pytest.param(8, 56, 56, 128, 256, 3, 2, 8, 128,
                 id="B=8 H=W=56 C=128 F=256 3x3 stride=2 block_h=8 block_f=128-tpu",
                 marks=on_tpu),
])
def test_strided(B, H, W, C, F, KH, stride, block_h, block_f, rng):
    """conv2d(x, w, stride, block_h, block_f): SAME padding for the stride, the output
    channels in blocks of block_f along the grid's last axis, each input window fetched
    once for all of them."""
    x, w = rng.normal((B, H, W, C)), rng.normal((KH, KH, C, F))
    Ho, Wo, tiles, window, Hp, Wp = conv_geometry(H, W, KH, KH, stride, block_h)
    bf = F if block_f is None else min(block_f, F)
    ran = measure(quant.conv2d, x, w, stride=stride, block_h=block_h, block_f=block_f,
                  structure=CONV.where(grid=(B, tiles, cdiv(F, bf))))
    half = (KH - 1) // 2
    tile, r = np.arange(Ho) // block_h, np.arange(Ho) % block_h   # output row = tile, row in it

    def first_block_weights():   # every channel block computed with w[..., :bf]
        return conv(x, np.tile(w[..., :bf], (1, 1, 1, cdiv(F, bf)))[..., :F], stride).astype(
            np.float32)

    check(ran, conv(x, w, stride).astype(np.float32), blocks=(1, block_h, None, bf),
          axes="B H W F", tolerance=1e-4, likely={
              "padding_symmetric": lambda: conv(x, w, stride, before=(half, half)).astype(
                  np.float32),
              "padded_after_only": lambda: conv(x, w, stride, before=(0, 0)).astype(np.float32),
              "first_block_weights": first_block_weights,
              "window_start_without_stride": lambda: conv(   # tile i's window at row i * block_h
                  x, w, stride, rows=tile * block_h + r * stride).astype(np.float32),
              "patches_at_stride_1": lambda: conv(           # stride not bound in the kernel
                  x, w, stride, rows=tile * block_h * stride + r,
                  cols=np.arange(Wo)).astype(np.float32)})
    if tpu_sized():
        return
    check_rows_read(ran, x, KH, block_h, Hp, Wp)
    check_window_in_vmem(ran, x, w, ran.output, KH, block_h, bf, stride, Wp)
    check_work(ran, flops=2 * B * tiles * block_h * Wo * C * cdiv(F, bf) * bf * KH * KH)
    item = x.itemsize
    w_reads = 1 if bf >= F else B * tiles            # the filter's blocks, once per tile
    windows = item * B * tiles * window * Wp * C     # one window of rows per tile
    check_traffic(ran, reference=windows + item * (w_reads * w.size + B * Ho * Wo * F),
                  minimum=item * (x.size + w.size + B * Ho * Wo * F),
                  shares=[(x, windows), (w, item * w_reads * w.size)])
    lowers_for_tpu(ran)


@puzzle("quant.strided")
@pytest.mark.parametrize("bad", [
    pytest.param("w", id="w with another C"),
    pytest.param("stride", id="stride=0"),
    pytest.param("block_f", id="block_f=255 for F=256 (neither all of F nor 128s)"),
])
def test_strided_checks_its_arguments(bad, rng):
    x, w = rng.normal((1, 8, 8, 4)), rng.normal((3, 3, 4, 256))
    stride, block_f = 1, None
    if bad == "w":
        w = w[:, :, :2]
    elif bad == "stride":
        stride = 0
    else:
        block_f = 255
    called = f"conv2d(x {x.shape}, w {w.shape}, stride={stride}, block_f={block_f})"
    raises_naming(bad, called, quant.conv2d, x, w, stride=stride, block_h=4, block_f=block_f)
