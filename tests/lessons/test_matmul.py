"""matmul's lesson machinery (pytest_pallas_hints/lessons/matmul.py) on its own: the
byte, flop and VMEM budgets against what the reference kernels measurably do, the
models of wrong accumulations on hand-worked sums, and choose_blocks' rules and the
check that words them."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from pytest_pallas_hints import runtime
from pytest_pallas_hints.checking import Diagnosed, measure
from pytest_pallas_hints.lessons import matmul as lesson

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def interpret_mode():
    """TPU interpret mode for every kernel here, as the plugin sets it for learners."""
    runtime.use_interpret_mode(True)


@pytest.fixture(scope="module")
def reference():
    spec = importlib.util.spec_from_file_location("reference_matmul",
                                                  ROOT / "reference" / "matmul.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ints(shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).integers(-4, 5, size=shape).astype(dtype)


# --- budgets against the reference's measured runs ------------------------------------

@pytest.mark.parametrize("M, K, N, bm, bk, bn", [
    pytest.param(17, 384, 257, 8, 128, 128, id="partial tiles: a and b read again"),
    pytest.param(16, 256, 256, 8, 256, 128, id="bk=K: a stays put across j"),
    pytest.param(16, 256, 128, 8, 256, 128, id="one block of b: read once"),
    pytest.param(8, 128, 128, 8, 128, 128, id="one block"),
])
def test_implied_bytes_flops_and_vmem_are_what_matmul_tiled_does(M, K, N, bm, bk, bn,
                                                                  reference):
    a, b = ints((M, K)), ints((K, N), seed=1)
    ran = measure(reference.matmul_tiled, a, b, bm=bm, bk=bk, bn=bn, structure=None)
    np.testing.assert_array_equal(ran.output, a @ b)
    assert ran.traffic.total == lesson.implied_bytes(M, K, N, bm, bk, bn, 4)
    assert ran.work == lesson.tile_flops(M, K, N, bm, bn)
    assert [found.total for found in ran.vmem] == [lesson.vmem_used(bm, bk, bn, 4)]
    lesson.check_blocks_given(ran, ran.traffic.total, bm=bm, bk=bk, bn=bn)
    lesson.check_bytes_modelled(ran, ran.traffic.total, bm=bm, bk=bk, bn=bn)
    with pytest.raises(Diagnosed) as failed:
        lesson.check_blocks_given(ran, ran.traffic.total + 1, bm=bm, bk=bk, bn=bn)
    assert failed.value.kind == "traffic_low"
    with pytest.raises(Diagnosed) as failed:
        lesson.check_bytes_modelled(ran, ran.traffic.total - 1, bm=bm, bk=bk, bn=bn)
    assert failed.value.kind == "model_mismatch"


def test_implied_bytes_of_a_hand_worked_grid():
    # M=16 K=256 N=256, (8, 128, 128) blocks, f32: a read once per column block (2), b
    # once per row block (2), the output written once
    assert lesson.implied_bytes(16, 256, 256, 8, 128, 128, 4) == \
        4 * (16 * 256 * 2 + 256 * 256 * 2 + 16 * 256)


def test_tile_flops_computes_partial_tiles_whole():
    assert lesson.tile_flops(17, 128, 257, 8, 128) == 2 * 24 * 384 * 128
    assert lesson.tile_flops(8, 128, 128, 8, 128, batch=3) == 3 * 2 * 8 * 128 * 128


def test_tile_flops_is_what_batched_matmul_does(reference):
    B, M, K, N, bm, bk, bn = 2, 17, 256, 129, 8, 128, 128
    a, b = ints((B, M, K)), ints((B, K, N), seed=1)
    ran = measure(reference.batched_matmul, a, b, bm=bm, bk=bk, bn=bn, structure=None)
    assert ran.work == lesson.tile_flops(M, K, N, bm, bn, B)


@pytest.mark.parametrize("M, K, N, bm, bk, bn", [
    pytest.param(9, 256, 257, 8, 128, 128, id="bias read again for each row block"),
    pytest.param(16, 384, 128, 16, 128, 128, id="one column block: bias read once"),
])
def test_epilogue_bytes_are_what_matmul_bias_gelu_moves(M, K, N, bm, bk, bn, reference):
    a, b, bias = ints((M, K)), ints((K, N), seed=1), ints((N,), seed=2)
    ran = measure(reference.matmul_bias_gelu, a, b, bias, bm=bm, bk=bk, bn=bn,
                  structure=None)
    assert ran.traffic.total == lesson.epilogue_bytes(M, K, N, bm, bk, bn, 4)


# --- choose_blocks' rules ------------------------------------------------------------

def test_sublanes_legal_and_the_legal_blocks():
    assert [lesson.sublanes(n) for n in (4, 2, 1)] == [8, 16, 32]
    assert lesson.legal(24, 8, 8) and lesson.legal(24, 24, 8) and not lesson.legal(24, 12, 8)
    assert not lesson.legal(24, 16, 8)                        # a multiple, but no divisor
    assert lesson.legal_blocks(16, 256, 128, 4) == [(8, 128, 128), (8, 256, 128),
                                                    (16, 128, 128), (16, 256, 128)]
    assert lesson.vmem_used(8, 128, 128, 4) == 2 * 4 * (8 * 128 + 128 * 128 + 8 * 128) + \
        4 * 8 * 128


@pytest.mark.parametrize("M, K, N, itemsize, vmem_bytes", [
    (2048, 2048, 2048, 4, 16 << 20), (48, 512, 1024, 2, 128 * 1024), (1, 256, 512, 4, 1 << 20),
    (64, 256, 128, 4, 284 * 1024),
])
def test_best_bytes_is_what_the_reference_choice_moves(M, K, N, itemsize, vmem_bytes,
                                                       reference):
    chosen = reference.choose_blocks(M, K, N, itemsize=itemsize, vmem_bytes=vmem_bytes)
    assert lesson.best_bytes(M, K, N, itemsize, vmem_bytes) == \
        lesson.implied_bytes(M, K, N, *chosen, itemsize)
    lesson.judge_blocks(chosen, M, K, N, itemsize, vmem_bytes)


def test_best_bytes_of_a_hand_worked_budget():
    # M=16 K=N=256 f32: the whole problem in one block takes 2 x 4 x (3 x 4096 + 65536) +
    # 4 x 4096 bytes of VMEM and moves every byte once; one byte less and the best is
    # (16, 256, 128), a read once, b once, in two column blocks
    whole = lesson.vmem_used(16, 256, 256, 4)
    once = 4 * (16 * 256 + 256 * 256 + 16 * 256)
    assert lesson.best_bytes(16, 256, 256, 4, whole) == once
    assert lesson.best_bytes(16, 256, 256, 4, whole - 1) == \
        lesson.implied_bytes(16, 256, 256, 16, 256, 128, 4) == once


@pytest.mark.parametrize("blocks, kind", [
    ((8, 128), "returned"),
    ((8, 128, 0), "returned"),
    ((12, 128, 128), "block_rule"),            # 12 rows: no divisor of 16
    ((16, 64, 128), "block_rule"),             # 64 lanes
    ((16, 256, 256), "vmem_budget"),
    ((8, 128, 128), "traffic"),                # fits, but (16, 256, 128) moves fewer bytes
])
def test_judge_blocks_names_the_first_rule_broken(blocks, kind):
    budget = lesson.vmem_used(16, 256, 256, 4) - 1
    lesson.judge_blocks((16, 256, 128), 16, 256, 256, 4, budget)
    with pytest.raises(Diagnosed) as failed:
        lesson.judge_blocks(blocks, 16, 256, 256, 4, budget)
    assert failed.value.kind == kind


# --- models of wrong accumulations ----------------------------------------------------

def test_k_blocks_sum_to_the_product():
    a, b = ints((8, 384)), ints((384, 16), seed=1)
    parts = lesson.k_blocks(a, b, 128)
    assert len(parts) == 3 and all(p.dtype == np.float32 for p in parts)
    np.testing.assert_array_equal(sum(parts), a @ b)


def test_summed_in_rounds_the_running_sum_at_every_k_step():
    a = np.ones((1, 3), "bfloat16")
    b = np.array([[256], [1], [1]], "bfloat16")
    # in bf16, 256 + 1 is 256 again, twice; in float32 the sum is exact
    assert lesson.summed_in(a.dtype, a, b, 1).astype(np.float32).tolist() == [[256.0]]
    assert lesson.summed_in(np.float32, a, b, 1).tolist() == [[258.0]]


def test_summed_in_bf16_partials_rounds_each_product_only():
    a = np.full((1, 3), 3, "bfloat16")
    b = np.full((3, 1), 129, "bfloat16")
    # 3 x 129 = 387 is 388 in bf16; 3 x 388 = 1164 rounds to 1168, where the exact 1161
    # rounds to 1160
    assert lesson.summed_in_bf16_partials(a, b, 1).astype(np.float32).tolist() == [[1168.0]]
    assert (a.astype(np.float32) @ b.astype(np.float32)).astype("bfloat16") \
        .astype(np.float32).tolist() == [[1160.0]]
    ones = np.ones((1, 3), "bfloat16")   # products exact in bf16: the f32 sum of them
    assert lesson.summed_in_bf16_partials(ones, np.array([[256], [1], [1]], "bfloat16"), 1) \
        .astype(np.float32).tolist() == [[258.0]]
