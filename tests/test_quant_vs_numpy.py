"""reference/quant.py's public API against integer and float64 NumPy and against
lax.conv_general_dilated at HIGHEST precision, in TPU interpret mode: quantize_int8,
int8_matmul (its integer part exact, beyond 2^24), int8_weight_matmul, int4_matmul (the
packing convention read straight from the bytes) and conv2d, on many shapes: a single
element, sizes no block divides, a row of zeros, the int8 extremes, every nibble from 0
to 15, one group and many, filters 1 to 5 wide (square or not), strides 1 to 3, odd
images, B=1, images smaller than the filter, blocks of output channels with a partial
last one. Then what the API promises besides values: every argument checked up front
with a ValueError that names it, quantised operands that cross HBM in their stored
width, a convolution that reads each input row a bounded number of times, and kernels
that lower for a real TPU.
"""
import functools
import importlib.util
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pytest_pallas_hints import runtime
from pytest_pallas_hints.checking import lowers_for_tpu, measure

ROOT = Path(__file__).resolve().parent.parent


def load_reference():
    path = ROOT / "reference" / "quant.py"
    spec = importlib.util.spec_from_file_location("reference_quant", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


quant = load_reference()


@pytest.fixture(autouse=True)
def interpret_mode():
    """TPU interpret mode for every kernel here, as the plugin sets it for learners."""
    runtime.use_interpret_mode(True)


def cdiv(a, b):
    return -(-a // b)


def int8s(gen, shape):
    """Uniform int8 in [-127, 127], the first row and column all 127, the last -127."""
    x = gen.integers(-127, 128, shape).astype(np.int8)
    x[0], x[-1] = 127, -127
    x[:, 0], x[:, -1] = 127, -127
    return x


def positive(gen, shape):
    return (np.exp(gen.uniform(-2.3, 2.3, shape)) / 127).astype(np.float32)


def assert_close(name, yours, expected, tolerance):
    """max |yours - expected| / max |expected| within ``tolerance``."""
    yours, expected = np.asarray(yours, np.float64), np.asarray(expected, np.float64)
    assert yours.shape == expected.shape, f"{name}: shape {yours.shape} != {expected.shape}"
    assert np.isfinite(yours).all(), f"{name}: not finite"
    error = np.abs(yours - expected).max() / max(np.abs(expected).max(), 1e-30)
    assert error <= tolerance, f"{name}: max |error| / max |expected| = {error:.2e}"


# --- 1. quantize_int8 ---------------------------------------------------------------------

@pytest.mark.parametrize("R, C, block_rows, dtype", [
    pytest.param(1, 1, 8, "float32", id="one element"),
    pytest.param(3, 130, 8, "float32", id="R=3 C=130: one partial block"),
    pytest.param(37, 256, 16, "float32", id="R=37 C=256 block_rows=16"),
    pytest.param(64, 128, 64, "bfloat16", id="bf16 one whole block"),
    pytest.param(50, 384, 32, "bfloat16", id="bf16 R=50 C=384"),
])
def test_quantize_int8(R, C, block_rows, dtype):
    gen = np.random.default_rng(R * C)
    magnitude = np.exp(gen.uniform(-6, 6, (R, 1)))
    x = np.array(jnp.asarray(gen.standard_normal((R, C)) * magnitude, dtype))
    x[R // 2] = 0                                       # a row of zeros
    if C > 1:
        x[0, 1] = -2 * np.abs(x[0]).max()               # a row whose largest |x| is negative
    q, scale = jax.jit(functools.partial(quant.quantize_int8, block_rows=block_rows))(x)
    assert (q.dtype, q.shape, scale.dtype, scale.shape) == (jnp.int8, (R, C), jnp.float32,
                                                            (R, 1))
    x32 = np.asarray(x, np.float32)
    amax = np.abs(x32).max(axis=1, keepdims=True)
    expected_scale = np.where(amax > 0, amax / np.float32(127), np.float32(1))
    np.testing.assert_array_equal(np.asarray(scale), expected_scale)
    ratio = x32.astype(np.float64) / expected_scale.astype(np.float64)
    q = np.asarray(q, np.int64)
    tie = np.abs(np.abs(ratio - np.floor(ratio)) - 0.5) < 1e-4   # float32 may round either way
    right = np.where(tie, (q == np.floor(ratio)) | (q == np.ceil(ratio)),
                     q == np.clip(np.round(ratio), -127, 127))
    assert right.all(), f"q wrong at {np.argwhere(~right)[:5].tolist()}"
    assert q.min() >= -127 and q.max() <= 127
    extreme = np.abs(q).max(axis=1)
    assert (extreme[amax[:, 0] > 0] == 127).all() and extreme[R // 2] == 0
    # x = q * scale to within half a step
    assert (np.abs(q * np.asarray(scale, np.float64) - x32) <= 0.5001 * expected_scale).all()


# --- 2, 3. int8_matmul --------------------------------------------------------------------

@pytest.mark.parametrize("M, K, N, bm, bk, bn", [
    pytest.param(1, 1, 1, 128, 128, 128, id="one element"),
    pytest.param(33, 300, 129, 32, 128, 128, id="M=33 K=300 N=129: tails everywhere"),
    pytest.param(64, 2048, 256, 32, 256, 128,
                 id="K=2048: sums past 2^24, exact only in int32"),
    pytest.param(40, 384, 200, 128, 512, 256, id="blocks larger than the array"),
])
def test_int8_matmul_is_exact_in_its_integer_part(M, K, N, bm, bk, bn):
    """With unit scales the output is the int32 sum converted once to float32: equal, bit
    for bit, to the int64 truth rounded to float32, also where |sum| > 2^24."""
    gen = np.random.default_rng(M * K + N)
    a, b = int8s(gen, (M, K)), int8s(gen, (K, N))
    ones_m, ones_n = np.ones((M, 1), np.float32), np.ones((1, N), np.float32)
    out = jax.jit(functools.partial(quant.int8_matmul, bm=bm, bk=bk, bn=bn))(
        a, ones_m, b, ones_n)
    truth = a.astype(np.int64) @ b.astype(np.int64)
    if K == 2048:
        assert np.abs(truth).max() > 2 ** 24
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(out), truth.astype(np.float32))
    int32 = jax.jit(functools.partial(quant.int8_matmul_int32, bm=min(bm, M), bn=min(bn, N),
                                      bk=bk if K % bk == 0 else K))(a, b)
    np.testing.assert_array_equal(np.asarray(int32), truth)


@pytest.mark.parametrize("M, K, N", [(8, 128, 128), (37, 300, 200), (128, 1000, 384)])
def test_int8_matmul_scales_rows_and_columns(M, K, N):
    """Each element to within a few float32 roundings of the float64 truth."""
    gen = np.random.default_rng(M + K + N)
    a, b = int8s(gen, (M, K)), int8s(gen, (K, N))
    a_scale, b_scale = positive(gen, (M, 1)), positive(gen, (1, N))
    out = jax.jit(functools.partial(quant.int8_matmul, bm=32, bk=128, bn=128))(
        a, a_scale, b, b_scale)
    truth = (a.astype(np.int64) @ b.astype(np.int64)) * a_scale.astype(np.float64) \
        * b_scale.astype(np.float64)
    np.testing.assert_allclose(np.asarray(out, np.float64), truth, rtol=1e-6, atol=0)


def test_quantize_then_int8_matmul_approximates_the_float_matmul():
    gen = np.random.default_rng(11)
    x, w = gen.standard_normal((64, 512)).astype(np.float32), \
        gen.standard_normal((512, 256)).astype(np.float32)
    xq, xs = quant.quantize_int8(x, block_rows=32)
    wq, ws = quant.quantize_int8(np.ascontiguousarray(w.T), block_rows=32)
    out = quant.int8_matmul(xq, xs, jnp.asarray(wq).T, jnp.asarray(ws).T)
    assert_close("x @ w", out, x.astype(np.float64) @ w, 2e-2)


# --- 4. int8_weight_matmul ----------------------------------------------------------------

@pytest.mark.parametrize("M, K, N, bm, bk, bn, dtype", [
    pytest.param(1, 1, 1, 16, 128, 128, "float32", id="one element"),
    pytest.param(20, 300, 200, 16, 128, 128, "float32", id="M=20 K=300 N=200"),
    pytest.param(7, 1000, 130, 16, 256, 128, "float32", id="M=7 K=1000 N=130"),
    pytest.param(48, 384, 256, 32, 128, 256, "bfloat16", id="bf16 M=48 K=384 N=256"),
    pytest.param(9, 513, 129, 16, 512, 128, "bfloat16", id="bf16 K=513: a 1-row K tail"),
])
def test_int8_weight_matmul(M, K, N, bm, bk, bn, dtype):
    gen = np.random.default_rng(M * N + K)
    x = jnp.asarray(gen.standard_normal((M, K)), dtype)
    w_q, w_scale = int8s(gen, (K, N)), positive(gen, (1, N))
    out = jax.jit(functools.partial(quant.int8_weight_matmul, bm=bm, bk=bk, bn=bn))(
        x, w_q, w_scale)
    assert out.dtype == jnp.dtype(dtype)
    truth = np.asarray(x, np.float64) @ (w_q.astype(np.float64) * w_scale)
    assert_close("out", out, truth, {"float32": 1e-5, "bfloat16": 1e-2}[dtype])


# --- 5. int4_matmul -----------------------------------------------------------------------

def unpacked(packed):
    """The convention, read from the bytes: byte [i, n] as uint8 holds u[2i, n] in its
    low nibble and u[2i + 1, n] in its high nibble."""
    byte = np.asarray(packed).view(np.uint8).astype(np.int64)
    u = np.empty((2 * byte.shape[0], byte.shape[1]), np.int64)
    u[0::2], u[1::2] = byte & 15, byte >> 4
    return u


@pytest.mark.parametrize("M, K, N, group_size, bm, bn, dtype", [
    pytest.param(1, 2, 1, 2, 16, 128, "float32", id="one byte"),
    pytest.param(5, 64, 130, 64, 16, 128, "float32", id="one group of K=64, N=130"),
    pytest.param(20, 384, 200, 128, 16, 128, "float32", id="3 groups M=20 N=200"),
    pytest.param(33, 1024, 256, 256, 32, 256, "float32", id="4 groups of 256"),
    pytest.param(16, 512, 128, 128, 16, 128, "bfloat16", id="bf16 4 groups"),
])
def test_int4_matmul(M, K, N, group_size, bm, bn, dtype):
    gen = np.random.default_rng(M * K + N)
    packed = gen.integers(-128, 128, (K // 2, N)).astype(np.int8)   # every byte, every nibble
    packed[:, 0] = -1                                                # both nibbles 15
    if N > 1:
        packed[:, 1] = 0                                             # both nibbles 0
    groups = K // group_size
    scales = gen.uniform(0.005, 0.05, (groups, N)).astype(np.float32)
    zeros = gen.uniform(0.0, 15.0, (groups, N)).astype(np.float32)
    x = jnp.asarray(gen.standard_normal((M, K)), dtype)
    out = jax.jit(functools.partial(quant.int4_matmul, group_size=group_size, bm=bm, bn=bn))(
        x, packed, scales, zeros)
    assert out.dtype == jnp.dtype(dtype)
    u = unpacked(packed)
    assert u.max() == 15 and (u.min() == 0 or N == 1)
    w = (u - np.repeat(zeros, group_size, axis=0)) * np.repeat(scales, group_size, axis=0)
    truth = np.asarray(x, np.float64) @ w
    assert_close("out", out, truth, {"float32": 1e-5, "bfloat16": 1e-2}[dtype])


# --- 6, 7. conv2d ---------------------------------------------------------------------------

def conv64(x, w, stride):
    """SAME cross-correlation in float64 NumPy, XLA's padding rule."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    B, H, W, C = x.shape
    KH, KW, _, F = w.shape
    (Ho, top, _), (Wo, left, _) = (quant.same_padding(H, KH, stride),
                                   quant.same_padding(W, KW, stride))
    xp = np.pad(x, ((0, 0), (top, (Ho - 1) * stride + KH), (left, (Wo - 1) * stride + KW),
                    (0, 0)))
    out = np.zeros((B, Ho, Wo, F))
    for kh in range(KH):
        for kw in range(KW):
            patch = xp[:, kh:kh + (Ho - 1) * stride + 1:stride,
                       kw:kw + (Wo - 1) * stride + 1:stride]
            out += np.einsum("bhwc,cf->bhwf", patch, w[kh, kw])
    return out


def xla_conv(x, w, stride):
    return jax.lax.conv_general_dilated(
        x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
        precision=jax.lax.Precision.HIGHEST)


CONVS = [
    pytest.param(1, 1, 1, 1, 1, 1, 1, 1, 1, None, id="one pixel, 1x1"),
    pytest.param(1, 9, 7, 4, 8, 1, 1, 1, 4, None, id="1x1 stride 1"),
    pytest.param(2, 9, 7, 4, 8, 3, 3, 1, 4, None, id="3x3 odd image, partial tile"),
    pytest.param(1, 16, 8, 8, 16, 5, 5, 1, 4, None, id="5x5 B=1"),
    pytest.param(1, 2, 3, 3, 8, 5, 5, 1, 8, None, id="5x5 on an image smaller than it"),
    pytest.param(1, 8, 9, 4, 8, 2, 4, 1, 3, None, id="2x4: even filters pad more after"),
    pytest.param(2, 11, 6, 3, 8, 3, 1, 1, 5, None, id="3x1"),
    pytest.param(1, 6, 10, 4, 8, 1, 5, 1, 2, None, id="1x5"),
    pytest.param(1, 9, 9, 4, 8, 1, 1, 2, 2, None, id="1x1 stride 2: a subsampling"),
    pytest.param(2, 10, 8, 4, 8, 1, 1, 2, 2, None, id="1x1 stride 2 on an even image"),
    pytest.param(1, 12, 9, 4, 8, 2, 2, 3, 2, None, id="2x2 stride 3: a filter below the stride"),
    pytest.param(2, 9, 7, 4, 256, 3, 3, 2, 2, 128, id="3x3 stride 2, 2 channel blocks"),
    pytest.param(1, 8, 8, 8, 200, 5, 5, 2, 4, 128, id="5x5 stride 2, F=200: a partial block"),
    pytest.param(1, 10, 11, 4, 8, 4, 4, 2, 3, None, id="4x4 stride 2"),
    pytest.param(1, 13, 8, 4, 8, 3, 3, 3, 2, None, id="3x3 stride 3"),
]


@pytest.mark.parametrize("B, H, W, C, F, KH, KW, stride, block_h, block_f", CONVS)
def test_conv2d(B, H, W, C, F, KH, KW, stride, block_h, block_f):
    gen = np.random.default_rng(B * H * W + KH * 10 + KW + stride)
    x = gen.standard_normal((B, H, W, C)).astype(np.float32)
    w = gen.standard_normal((KH, KW, C, F)).astype(np.float32)
    out = jax.jit(functools.partial(quant.conv2d, stride=stride, block_h=block_h,
                                    block_f=block_f))(x, w)
    expected = conv64(x, w, stride)
    assert out.shape == (B, cdiv(H, stride), cdiv(W, stride), F) == expected.shape
    assert_close("vs float64", out, expected, 1e-5)
    assert_close("vs conv_general_dilated", out, xla_conv(x, w, stride), 1e-5)
    if stride == 1 and block_f is None:
        rows = jax.jit(functools.partial(quant.conv2d_rows, block_h=block_h))(x, w)
        assert_close("conv2d_rows", rows, expected, 1e-5)


def test_conv2d_in_bf16():
    gen = np.random.default_rng(5)
    x = jnp.asarray(gen.standard_normal((2, 12, 10, 16)), jnp.bfloat16)
    w = jnp.asarray(gen.standard_normal((3, 3, 16, 128)), jnp.bfloat16)
    out = quant.conv2d(x, w, stride=2, block_h=4)
    assert out.dtype == jnp.bfloat16
    assert_close("bf16", out, conv64(x, w, 2), 1e-2)


# --- what the API promises besides values ---------------------------------------------------

I8, F32 = np.int8, np.float32


def z(shape, dtype=F32):
    return np.zeros(shape, dtype)


@pytest.mark.parametrize("name, call", [
    ("x", lambda: quant.quantize_int8(z((8, 128), np.int32))),
    ("x", lambda: quant.quantize_int8(z((8,)))),
    ("block_rows", lambda: quant.quantize_int8(z((8, 128)), block_rows=12)),
    ("a_q", lambda: quant.int8_matmul(z((8, 128)), z((8, 1)), z((128, 128), I8),
                                      z((1, 128)))),
    ("b_q", lambda: quant.int8_matmul(z((8, 128), I8), z((8, 1)), z((64, 128), I8),
                                      z((1, 128)))),
    ("a_scale", lambda: quant.int8_matmul(z((8, 128), I8), z((8,)), z((128, 128), I8),
                                          z((1, 128)))),
    ("a_scale", lambda: quant.int8_matmul(z((8, 128), I8), z((8, 1), np.float16),
                                          z((128, 128), I8), z((1, 128)))),
    ("b_scale", lambda: quant.int8_matmul(z((8, 128), I8), z((8, 1)), z((128, 128), I8),
                                          z((128, 1)))),
    ("bm", lambda: quant.int8_matmul(z((8, 128), I8), z((8, 1)), z((128, 128), I8),
                                     z((1, 128)), bm=16)),
    ("bk", lambda: quant.int8_matmul(z((8, 128), I8), z((8, 1)), z((128, 128), I8),
                                     z((1, 128)), bk=100)),
    ("x", lambda: quant.int8_weight_matmul(z((8, 128), I8), z((128, 128), I8), z((1, 128)))),
    ("w_q", lambda: quant.int8_weight_matmul(z((8, 128)), z((128, 128)), z((1, 128)))),
    ("w_q", lambda: quant.int8_weight_matmul(z((8, 128)), z((64, 128), I8), z((1, 128)))),
    ("w_scale", lambda: quant.int8_weight_matmul(z((8, 128)), z((128, 128), I8), z((128,)))),
    ("bn", lambda: quant.int8_weight_matmul(z((8, 128)), z((128, 128), I8), z((1, 128)),
                                            bn=64)),
    ("x", lambda: quant.int4_matmul(z((8, 256), I8), z((128, 128), I8), z((2, 128)),
                                    z((2, 128)))),
    ("w_packed", lambda: quant.int4_matmul(z((8, 256)), z((256, 128), I8), z((2, 128)),
                                           z((2, 128)))),
    ("w_packed", lambda: quant.int4_matmul(z((8, 256)), z((128, 128), np.uint8), z((2, 128)),
                                           z((2, 128)))),
    ("w_packed", lambda: quant.int4_matmul(z((8, 7)), z((3, 128), I8), z((1, 128)),
                                           z((1, 128)), group_size=7)),
    ("group_size", lambda: quant.int4_matmul(z((8, 256)), z((128, 128), I8), z((3, 128)),
                                             z((3, 128)), group_size=96)),
    ("scales", lambda: quant.int4_matmul(z((8, 256)), z((128, 128), I8), z((1, 128)),
                                         z((2, 128)))),
    ("zeros", lambda: quant.int4_matmul(z((8, 256)), z((128, 128), I8), z((2, 128)),
                                        z((2, 128), np.int32))),
    ("x", lambda: quant.conv2d(z((8, 8, 4)), z((3, 3, 4, 8)))),
    ("w", lambda: quant.conv2d(z((1, 8, 8, 4)), z((3, 3, 2, 8)))),
    ("w", lambda: quant.conv2d(z((1, 8, 8, 4)), z((3, 3, 4, 8), np.float16))),
    ("stride", lambda: quant.conv2d(z((1, 8, 8, 4)), z((3, 3, 4, 8)), stride=0)),
    ("block_h", lambda: quant.conv2d(z((1, 8, 8, 4)), z((3, 3, 4, 8)), block_h=0)),
    ("block_f", lambda: quant.conv2d(z((1, 8, 8, 4)), z((3, 3, 4, 256)), block_f=100)),
])
def test_arguments_are_checked_up_front_and_named(name, call):
    with pytest.raises(ValueError) as info:
        call()
    assert re.search(rf"(^|: ){re.escape(name)}( must|=)", str(info.value)), str(info.value)


def test_quantised_operands_cross_hbm_in_their_stored_width():
    """int8 and packed 4-bit operands are read as stored (times the re-reads the grid
    implies); a float copy of the same weights made in JAX is counted as 4 times the
    bytes, so the check can tell them apart."""
    gen = np.random.default_rng(1)
    M, K, N = 32, 512, 256
    x = gen.standard_normal((M, K)).astype(np.float32)
    w_q, w_scale = int8s(gen, (K, N)), positive(gen, (1, N))
    ran = measure(functools.partial(quant.int8_weight_matmul, bm=32, bk=128, bn=128),
                  x, w_q, w_scale, structure=None)
    assert ran.bytes_from(w_q) == w_q.nbytes          # one row block: every byte read once
    packed = gen.integers(-128, 128, (K // 2, N)).astype(np.int8)
    scales, zeros = positive(gen, (4, N)), positive(gen, (4, N))
    ran = measure(functools.partial(quant.int4_matmul, group_size=128, bm=32, bn=128),
                  x, packed, scales, zeros, structure=None)
    assert ran.bytes_from(packed) == packed.nbytes

    def dequantised_first(w_q, w_scale):   # a kernel that reads a float copy of w_q
        return quant.quantize_int8(w_q.astype(jnp.float32) * w_scale, block_rows=128)

    ran = measure(dequantised_first, w_q, w_scale, structure=None)
    assert ran.bytes_from(w_q) == 4 * w_q.nbytes


@pytest.mark.parametrize("H, KH, stride, block_h", [
    (32, 1, 1, 1), (32, 3, 1, 1), (32, 3, 1, 4), (33, 5, 1, 2), (32, 5, 1, 8),
    (31, 3, 2, 2), (40, 5, 2, 4), (40, 1, 2, 4)])
def test_conv2d_reads_each_row_a_bounded_number_of_times(H, KH, stride, block_h):
    """Each padded input row crosses HBM at most ceil(KH / block_h) + 1 times (the
    windows overlap by their halo), however many channel blocks there are."""
    gen = np.random.default_rng(H + KH)
    B, W, C, F = 2, 8, 4, 256
    x = gen.standard_normal((B, H, W, C)).astype(np.float32)
    w = gen.standard_normal((KH, 3, C, F)).astype(np.float32)
    ran = measure(functools.partial(quant.conv2d, stride=stride, block_h=block_h,
                                    block_f=128), x, w, structure=None)
    Ho, Wo = cdiv(H, stride), cdiv(W, stride)
    top, left = quant.same_padding(H, KH, stride)[1], quant.same_padding(W, 3, stride)[1]
    Hp = max((cdiv(Ho, block_h) * block_h - 1) * stride + KH, top + H)
    Wp = max((Wo - 1) * stride + 3, left + W)
    row = Wp * C * x.itemsize
    reads = ran.bytes_from(x) / (B * Hp * row)
    assert reads <= cdiv(KH, block_h) + 1, reads
    assert ran.bytes_from(w) == w.nbytes * B * cdiv(Ho, block_h)   # once per tile


LOWERED = [
    ("quantize_int8", lambda: (quant.quantize_int8, (z((40, 256)),), {"block_rows": 16})),
    ("int8_matmul", lambda: (quant.int8_matmul, (z((40, 300), I8), z((40, 1)),
                                                 z((300, 200), I8), z((1, 200))),
                             {"bm": 32})),
    ("int8_weight_matmul", lambda: (quant.int8_weight_matmul,
                                    (z((20, 300), jnp.bfloat16), z((300, 200), I8),
                                     z((1, 200))), {"bm": 16})),
    ("int4_matmul", lambda: (quant.int4_matmul, (z((20, 384)), z((192, 200), I8),
                                                 z((3, 200)), z((3, 200))), {"bm": 16})),
    ("int4_matmul, one group", lambda: (quant.int4_matmul,
                                        (z((16, 64)), z((32, 128), I8), z((1, 128)),
                                         z((1, 128))), {"group_size": 64, "bm": 16})),
    ("conv2d", lambda: (quant.conv2d, (z((2, 9, 7, 4)), z((3, 3, 4, 256))),
                        {"stride": 2, "block_h": 2, "block_f": 128})),
    ("conv2d 5x5", lambda: (quant.conv2d, (z((1, 16, 8, 8)), z((5, 5, 8, 16))),
                            {"block_h": 4})),
]


@pytest.mark.parametrize("name, make", LOWERED, ids=[name for name, _ in LOWERED])
def test_every_kernel_lowers_for_a_tpu(name, make):
    fn, args, static = make()
    lowers_for_tpu(fn, *args, **static)
