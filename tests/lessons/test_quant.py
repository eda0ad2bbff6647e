"""pytest_pallas_hints/lessons/quant.py on its own: the models of right and known wrong
answers against hand-worked cases and independent computations (lax's convolution, the
packed bytes decoded again here), the budgets against what the reference kernels
measurably do, and the chapter's checks and program readers on the reference and on
known mistakes."""
import functools
import importlib.util
from pathlib import Path

import jax
import numpy as np
import pytest

from pytest_pallas_hints import runtime
from pytest_pallas_hints.checking import Diagnosed, measure
from pytest_pallas_hints.lessons import quant as lesson

ROOT = Path(__file__).resolve().parents[2]


def chapter(wrong=None):
    """reference/quant.py as a module, with tests/mistakes/quant/<wrong>.py patched in."""
    spec = importlib.util.spec_from_file_location("reference_quant_lesson",
                                                  ROOT / "reference" / "quant.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if wrong:
        path = ROOT / "tests" / "mistakes" / "quant" / f"{wrong}.py"
        exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


@pytest.fixture(autouse=True)
def interpret_mode():
    runtime.use_interpret_mode(True)


def kind(check, *args, **kwargs) -> str:
    """The finding kind of a lesson check ('' where it passes)."""
    try:
        check(*args, **kwargs)
    except Diagnosed as failure:
        return failure.kind
    return ""


def int8s(gen, shape):
    return gen.integers(-127, 128, shape).astype(np.int8)


# --- models ---------------------------------------------------------------------------

def test_exact_and_wrap8_by_hand():
    a, b = np.array([[127, 127]], np.int8), np.array([[127], [127]], np.int8)
    assert lesson.exact(a, b).tolist() == [[32258]]              # beyond int8 and int16
    assert lesson.wrap8([127, 128, 255, 256, -129, 32258]).tolist() == [127, -128, -1, 0, 127, 2]


def test_k_products_are_the_blocks_of_the_exact_sum():
    gen = np.random.default_rng(0)
    a, b = int8s(gen, (5, 300)), int8s(gen, (300, 3))
    products = lesson.k_products(a, b, 128)
    assert len(products) == 3                                   # 128 + 128 + 44
    np.testing.assert_array_equal(sum(products), lesson.exact(a, b))
    np.testing.assert_array_equal(products[-1], lesson.exact(a[:, 256:], b[256:]))


def test_per_block_scale_by_hand():
    amax = np.array([[1.0], [127.0], [0.0], [0.0], [254.0]], np.float32)
    yours = np.full((5, 1), 7.0, np.float32)
    scale = lesson.per_block_scale(amax, 2, yours)
    # blocks [1, 127] -> 127 / 127; [0, 0] -> 1 (no zero scale); the partial last block: yours
    assert scale[:, 0].tolist() == [1.0, 1.0, 1.0, 1.0, 7.0]


def test_near_takes_either_side_of_an_integer_only_where_q_does():
    ratio = np.array([2.9999999, -3.9999999, 1.4])
    assert lesson.near(ratio, np.array([2, -3, 1]), np.trunc).tolist() == [2, -3, 1]
    assert lesson.near(ratio, np.array([3, -4, 1]), np.trunc).tolist() == [3, -4, 1]
    assert lesson.near(ratio, np.array([9, 9, 9]), np.trunc).tolist() == [2, -3, 1]
    assert lesson.near(np.array([200.0, -300.0]), None, np.round).tolist() == [127, -127]


def test_summed_in_bf16_rounds_after_every_k_step():
    x = np.ones((1, 4))
    w = np.array([[256.0], [1.0], [0.0], [1.0]])    # 256 + 1 rounds back to 256 in bf16
    bf16 = np.dtype(jax.numpy.bfloat16)
    assert float(lesson.summed_in_bf16(x, w, 1.0, 2, bf16)[0, 0]) == 256
    assert float(lesson.summed_in_bf16(x, w, 1.0, 1, bf16)[0, 0]) == 256
    assert float(lesson.summed_in_bf16(x, w, 1.0, 4, bf16)[0, 0]) == 258  # one sum: 258
    assert float(lesson.summed_in_bf16(x, w, 0.5, 4, bf16)[0, 0]) == 129


def test_dequantized_by_hand():
    u = np.array([[0, 15], [3, 3], [8, 1], [2, 2]])
    scales, zeros = np.array([[1.0, 2.0], [0.5, 0.25]]), np.array([[1.0, 0.0], [8.0, 1.0]])
    assert lesson.dequantized(u, scales, zeros, 2).tolist() == [
        [-1.0, 30.0], [2.0, 6.0], [0.0, 0.0], [-3.0, 0.25]]


def test_int4_mistakes_are_the_bytes_decoded_the_wrong_ways():
    """Each known wrong unpacking, decoded here from the packed bytes themselves."""
    gen = np.random.default_rng(1)
    K, N, group_size = 8, 3, 4
    u = gen.integers(0, 16, (K, N))
    u[:, 0] = 15
    packed = (u[0::2] | (u[1::2] << 4)).astype(np.uint8).view(np.int8)
    x = gen.standard_normal((2, K)).astype(np.float32)
    scales, zeros = gen.uniform(0.5, 2, (2, N)), gen.uniform(0, 15, (2, N))
    mistakes = lesson.int4_mistakes(x, u, packed, scales, zeros, group_size)
    low, high = packed.view(np.uint8) & 15, packed.view(np.uint8) >> 4

    def times(w):
        return (x.astype(np.float64) @ w).astype(np.float32)

    def interleaved(even, odd):
        return np.stack([even, odd], axis=1).reshape(K, N)

    right = lesson.dequantized(interleaved(low, high), scales, zeros, group_size)
    np.testing.assert_allclose(times(right), times(lesson.dequantized(u, scales, zeros, 4)))
    expected = {
        "nibbles_swapped": lesson.dequantized(interleaved(high, low), scales, zeros, 4),
        "high_nibble_signed": lesson.dequantized(
            interleaved(low, packed >> 4), scales, zeros, 4),   # an arithmetic shift of int8
        "zero_point_forgotten": lesson.dequantized(u, scales, 0 * zeros, 4),
        "zero_point_after_scale": u * np.repeat(scales, 4, 0) - np.repeat(zeros, 4, 0),
        "first_group_scales": (u - zeros[0]) * scales[0],
        "halves_not_interleaved": lesson.dequantized(   # a group's low nibbles, then its high
            np.concatenate([low[:2], high[:2], low[2:], high[2:]]), scales, zeros, 4),
    }
    assert set(expected) < set(mistakes)
    for name, w in expected.items():
        np.testing.assert_allclose(mistakes[name](), times(w), rtol=1e-6, err_msg=name)
    # a logical shift of the byte widened to int32: the high nibble keeps the sign's 1s
    unmasked = packed.astype(np.int32).view(np.uint32) >> 4
    assert (unmasked[packed < 0] > 2 ** 27).all()
    w32 = ((interleaved(low, unmasked).astype(np.float32) - np.repeat(zeros, 4, 0).astype(
        np.float32)) * np.repeat(scales, 4, 0).astype(np.float32)).astype(np.float32)
    np.testing.assert_allclose(mistakes["high_nibble_unmasked"](), times(w32), rtol=1e-6)


def lax_conv(x, w, stride, padding):
    return np.asarray(jax.lax.conv_general_dilated(
        x, w, (stride, stride), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"),
        precision=jax.lax.Precision.HIGHEST))


@pytest.mark.parametrize("H, W, KH, KW, stride", [
    (9, 7, 3, 3, 1), (8, 8, 5, 5, 2), (9, 7, 3, 3, 2), (16, 8, 5, 1, 1), (2, 3, 3, 3, 3)])
def test_conv_is_lax_same_convolution(H, W, KH, KW, stride):
    gen = np.random.default_rng(H * W)
    x = gen.standard_normal((2, H, W, 3)).astype(np.float32)
    w = gen.standard_normal((KH, KW, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(lesson.conv(x, w, stride), lax_conv(x, w, stride, "SAME"),
                               rtol=1e-4, atol=1e-4)
    Ho, Wo = -(-H // stride), -(-W // stride)
    assert lesson.same(H, KH, stride)[0] == Ho and lesson.same(W, KW, stride)[0] == Wo
    # known wrong variants: no padding before the image, the filter flipped
    after = ((0, (Ho - 1) * stride + KH - H), (0, (Wo - 1) * stride + KW - W))
    np.testing.assert_allclose(lesson.conv(x, w, stride, before=(0, 0)),
                               lax_conv(x, w, stride, after), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(lesson.conv(x, w, stride, flip=True),
                               lax_conv(x, w[::-1, ::-1], stride, "SAME"), rtol=1e-4, atol=1e-4)


def test_same_padding_by_hand():
    assert lesson.same(9, 3, 1) == (9, 1)
    assert lesson.same(8, 5, 2) == (4, 1)      # (3 * 2 + 5 - 8) // 2: 3 rows in all
    assert lesson.same(8, 4, 1) == (8, 1)      # 3 rows of padding: one before, two after
    assert lesson.same(2, 3, 3) == (1, 0)


def test_conv_geometry_by_hand():
    # H=9, KH=3, stride 1, block_h=4: 9 rows out, 3 tiles, windows of 6 rows, one row of
    # padding before; the last tile's window ends at row 2 * 4 + 6 = 14
    assert lesson.conv_geometry(9, 7, 3, 3, 1, 4) == (9, 7, 3, 6, 14, 9)
    # H=W=8, KH=5, stride 2, block_h=4: 4 rows out, one tile, a window of 3 * 2 + 5 = 11
    assert lesson.conv_geometry(8, 8, 5, 5, 2, 4) == (4, 4, 1, 11, 11, 11)


# --- budgets against what the reference kernels do -----------------------------------

def test_tile_flops_and_tiled_bytes_by_hand():
    assert lesson.tile_flops(33, 384, 129, 32, 128) == 2 * 64 * 256 * 384
    # a read twice (2 column blocks), b twice (2 row blocks), the int32 output once
    assert lesson.tiled_bytes(33, 384, 129, 32, 128, 128, a_item=1, b_item=1, out_item=4) \
        == 33 * 384 * 2 + 384 * 129 * 2 + 33 * 129 * 4
    # one K block: a once; b once per row block; a row scale once, a column scale like b
    assert lesson.tiled_bytes(32, 128, 256, 16, 128, 128, a_item=2, b_item=1, out_item=2,
                              row_bytes=4, col_bytes=4) \
        == 32 * 128 * 2 + 128 * 256 * 2 + 32 * 256 * 2 + 32 * 4 + 256 * 4 * 2
    # one block of everything: each operand once
    assert lesson.tiled_bytes(8, 128, 128, 8, 128, 128, a_item=1, b_item=1, out_item=4,
                              col_bytes=4) == 8 * 128 + 128 * 128 + 8 * 128 * 4 + 128 * 4


@pytest.mark.parametrize("M, K, N, bm, bk, bn", [
    (33, 384, 129, 32, 128, 128), (32, 128, 128, 32, 128, 128), (16, 256, 384, 8, 128, 256)])
def test_int8_budgets_are_what_the_reference_does(M, K, N, bm, bk, bn):
    gen = np.random.default_rng(M + K + N)
    a, b = int8s(gen, (M, K)), int8s(gen, (K, N))
    ran = measure(functools.partial(chapter().int8_matmul_int32, bm=bm, bk=bk, bn=bn), a, b,
                  structure=None)
    assert ran.work == lesson.tile_flops(M, K, N, bm, bn)
    assert ran.traffic.total == lesson.tiled_bytes(M, K, N, bm, bk, bn, a_item=1, b_item=1,
                                                   out_item=4)


def test_weight_only_budget_is_what_the_reference_does():
    """K=300 padded to 384 by the reference: the budget counts the padded K."""
    M, K, N, bm, bk, bn = 17, 300, 129, 16, 128, 128
    gen = np.random.default_rng(2)
    x, w = gen.standard_normal((M, K)).astype(np.float32), int8s(gen, (K, N))
    scale = gen.uniform(0.01, 0.02, (1, N)).astype(np.float32)
    ran = measure(functools.partial(chapter().int8_weight_matmul, bm=bm, bk=bk), x, w, scale,
                  structure=None)
    Kp = 384
    assert ran.work == lesson.tile_flops(M, Kp, N, bm, bn)
    assert ran.traffic.total == lesson.tiled_bytes(M, Kp, N, bm, bk, bn, a_item=4, b_item=1,
                                                   out_item=4, col_bytes=4)


@pytest.mark.parametrize("B, H, W, C, F, KH, KW, block_h", [
    (2, 9, 7, 4, 8, 3, 3, 4), (1, 16, 8, 8, 16, 5, 1, 4)])
def test_conv_budgets_are_what_the_reference_does(B, H, W, C, F, KH, KW, block_h, monkeypatch):
    gen = np.random.default_rng(H)
    x = gen.standard_normal((B, H, W, C)).astype(np.float32)
    w = gen.standard_normal((KH, KW, C, F)).astype(np.float32)
    ran = measure(functools.partial(chapter().conv2d_rows, block_h=block_h), x, w,
                  structure=None)
    np.testing.assert_allclose(ran.output, lesson.conv(x, w), rtol=1e-4, atol=1e-4)
    Ho, Wo, tiles, window, Hp, Wp = lesson.conv_geometry(H, W, KH, KW, 1, block_h)
    assert ran.bytes_from(x, "read") == 4 * B * tiles * window * Wp * C   # a window a tile
    lesson.check_rows_read(ran, x, KH, block_h, Hp, Wp)
    budgets = []
    monkeypatch.setattr(lesson, "check_vmem", lambda ran, most, why: budgets.append(most))
    lesson.check_window_in_vmem(ran, x, w, ran.output, KH, block_h, F, 1, Wp)
    rows = 2 * block_h + KH   # two blocks of block_h rows and a halo: room for a window
    assert budgets == [2 * rows * Wp * C * 4 + 2 * KH * KW * C * F * 4
                       + 2 * block_h * W * F * 4 + 4 * block_h * W * F]
    assert max(v.total for v in ran.vmem) <= budgets[0]


# --- checks, on stand-ins for a measured run -------------------------------------------

class Ran:
    """What the chapter's byte and block checks read of a measured run."""

    def __init__(self, read=0, blocks=()):
        self.read, self.blocks = read, list(blocks)

    def bytes_from(self, array, direction="read"):
        return self.read

    def blocks_from(self, array):
        return self.blocks


class Block:
    def __init__(self, name, block_shape, array_shape):
        self.name, self.block_shape, self.array_shape = name, block_shape, array_shape


def test_check_stored_width_allows_the_grid_s_rereads_only():
    w = np.zeros((128, 64), np.int8)
    assert kind(lesson.check_stored_width, Ran(read=3 * w.nbytes), w, 3, "w_q") == ""
    assert kind(lesson.check_stored_width, Ran(read=3 * w.nbytes + 1), w, 3, "w_q") \
        == "dequantised_in_hbm"


def test_check_rows_read_bound_by_hand():
    x = np.zeros((2, 9, 7, 4), np.float32)
    # KH=3, block_h=4: each padded row at most ceil(3 / 4) + 1 = 2 times; 14 rows of 9 x 4
    most = 2 * 2 * 14 * 9 * 4 * 4
    assert kind(lesson.check_rows_read, Ran(read=most), x, 3, 4, 14, 9) == ""
    assert kind(lesson.check_rows_read, Ran(read=most + 1), x, 3, 4, 14, 9) == "rows_reread"


def test_check_k_padded_by_hand():
    a = np.zeros((8, 300), np.int8)
    whole = [Block("a_q", (8, 128), (8, 384))]
    hanging = [Block("a_q", (8, 128), (8, 300))]
    one = [Block("a_q", (8, 300), (8, 300))]   # one block that is all of K
    for blocks, expected in ((whole, ""), (hanging, "k_not_padded"), (one, "")):
        assert kind(lesson.check_k_padded, Ran(blocks=blocks), [(a, 1, "a_q's columns")]) \
            == expected


def test_check_int32_zeroed_by_hand():
    truth = np.arange(12).reshape(3, 4) * 1000
    assert kind(lesson.check_int32_zeroed, truth, truth) == ""
    assert kind(lesson.check_int32_zeroed, truth + 2147483647, truth) == "scratch_not_zeroed"
    assert kind(lesson.check_int32_zeroed, truth[:2] + 2147483647, truth) == ""   # shape


# --- the program readers, on the reference and on known mistakes -----------------------

@pytest.mark.parametrize("wrong, expected", [
    (None, ""), ("int8_dot_float_accumulator", "accumulator_dtype"),
    ("int8_dot_int8_accumulator", "int8_accumulator")])
def test_check_int32_accumulator_reads_the_carried_dtype(wrong, expected):
    gen = np.random.default_rng(3)
    a, b = int8s(gen, (32, 256)), int8s(gen, (256, 128))
    ran = measure(functools.partial(chapter(wrong).int8_matmul_int32, bm=32, bk=128, bn=128),
                  a, b, structure=None)
    assert kind(lesson.check_int32_accumulator, ran) == expected


@pytest.mark.parametrize("wrong, expected", [
    (None, ""), ("dequant_scales_every_step", "scales_every_step")])
def test_check_scales_at_the_last_step_follows_the_scales(wrong, expected):
    gen = np.random.default_rng(4)
    a, b = int8s(gen, (32, 256)), int8s(gen, (256, 128))
    a_scale = gen.uniform(0.01, 0.02, (32, 1)).astype(np.float32)
    b_scale = gen.uniform(0.01, 0.02, (1, 128)).astype(np.float32)
    ran = measure(functools.partial(chapter(wrong).int8_matmul, bm=32), a, a_scale, b,
                  b_scale, structure=None)
    assert kind(lesson.check_scales_at_the_last_step, ran, (a_scale, b_scale)) == expected
    assert kind(lesson.check_scales_at_the_last_step, ran, ()) == ""   # nothing to follow


@pytest.mark.parametrize("wrong, expected", [
    (None, ""), ("weight_only_float32_weights", "dot_dtype")])
def test_check_dot_in_x_dtype_reads_every_dot(wrong, expected):
    gen = np.random.default_rng(5)
    x = gen.integers(0, 9, (16, 256)).astype(jax.numpy.bfloat16)
    w, scale = int8s(gen, (256, 128)), np.full((1, 128), 0.5, np.float32)
    ran = measure(functools.partial(chapter(wrong).int8_weight_matmul, bm=16, bk=128), x, w,
                  scale, structure=None)
    assert kind(lesson.check_dot_in_x_dtype, ran, x, "the int8 block") == expected


@pytest.mark.parametrize("wrong, expected", [(None, ""), ("halo_taps_in_bf16", "taps_narrow")])
def test_check_taps_in_float32_reads_every_sum(wrong, expected):
    gen = np.random.default_rng(6)
    x = gen.integers(0, 9, (1, 8, 8, 16)).astype(jax.numpy.bfloat16)
    w = gen.integers(0, 9, (3, 3, 16, 16)).astype(jax.numpy.bfloat16)
    ran = measure(functools.partial(chapter(wrong).conv2d_rows, block_h=8), x, w,
                  structure=None)
    assert kind(lesson.check_taps_in_float32, ran) == expected
