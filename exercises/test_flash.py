"""Tests for exercises/flash.py. Run them, don't edit them:

    pytest exercises/test_flash.py               # all puzzles of the chapter
    pytest exercises/test_flash.py -k causal     # one puzzle
    pytest exercises/test_flash.py -k causal --hint

Every test compares your code with attention computed in float64 NumPy, on at
least two shapes (one an edge case: one block, a length the block does not
divide, bfloat16), then checks that the kernels would compile for a real TPU.
Two tests count the bytes your kernels move between HBM and VMEM. Tests
marked `tpu` run realistic sizes on a real TPU and are skipped elsewhere.
"""
import jax
import numpy as np
import pytest

from pytest_pallas_hints import (Structure, cdiv, chapter, check, check_structure,
                                 check_traffic, check_work, lowers_for_tpu, measure,
                                 run_jax, tpu_sized)
# The right answers (float64 NumPy attention and its gradients) and the inputs drawn:
from pytest_pallas_hints.lessons.flash import attention, attention_grads, inputs, per_group
# What the kit knows besides: known wrong answers, budgets, the chapter's own checks.
from pytest_pallas_hints.lessons import flash as lesson

flash = chapter("flash")

puzzle = pytest.mark.puzzle
on_tpu = pytest.mark.tpu

# What each lesson requires of your program, checked from its trace: your own
# kernels compute the scores and the softmax; nothing but reshapes happens
# around them unless listed in `outside`.
ATTENTION = Structure(inside={"dot_general", "exp"})
# The backward's row term delta = sum(dO * O) may be computed around the kernels.
DELTA = {"mul", "reduce_sum", "broadcast_in_dim", "convert_element_type", "slice"}


def with_grads(q, k, v, do, *, attend, **static):
    """attend(q, k, v) and its gradients (dq, dk, dv) for the output cotangent do."""
    o, vjp = jax.vjp(lambda q, k, v: attend(q, k, v, **static), q, k, v)
    return (o, *vjp(do))


# 1 -------------------------------------------------------------------------
@puzzle("flash.dense")
@pytest.mark.parametrize("B, N, K, T, S, H, causal, dtype", [
    pytest.param(1, 4, 2, 48, 80, 32, True, "float32", id="B=1 N=4 K=2 T=48 S=80 H=32 keys j<=i"),
    pytest.param(2, 2, 2, 1, 1, 8, False, "bfloat16", id="B=2 N=K=2 T=S=1 H=8 bf16 (one token)"),
    pytest.param(4, 16, 4, 2048, 2048, 128, True, "bfloat16",
                 id="B=4 N=16 K=4 T=S=2048 bf16 keys j<=i-tpu", marks=on_tpu),
])
def test_dense(B, N, K, T, S, H, causal, dtype, rng):
    q, k, v = inputs(rng, B, N, K, T, S, H, dtype)

    check(run_jax(flash.attention, q, k, v, causal=causal),
          attention(q, k, v, causal=causal)[0].astype(dtype), blocks=(1, 1, None, None),
          axes="B N T H", likely=lesson.dense_mistakes(q, k, v, causal, dtype))


# 2 -------------------------------------------------------------------------
@puzzle("flash.online")
@pytest.mark.parametrize("T, S, H, block_kv", [
    pytest.param(64, 384, 32, 128, id="T=64 S=384 H=32 block_kv=128"),
    pytest.param(16, 257, 32, 128, id="T=16 S=257 block_kv=128 (last chunk: 1 key)"),
    pytest.param(1024, 8192, 128, 512, id="T=1024 S=8192 block_kv=512-tpu", marks=on_tpu),
])
def test_online(T, S, H, block_kv, rng):
    # Scores spread wide enough that the running max moves from chunk to chunk.
    q, k, v = rng.normal((T, H), scale=3.0), rng.normal((S, H)), rng.normal((S, H))
    expected = attention(q[None, None], k[None, None], v[None, None])[0][0, 0]

    check(run_jax(flash.online_attention, q, k, v, block_kv=block_kv), expected.astype(np.float32),
          tolerance=1e-4, likely=lesson.online_mistakes(q, k, v, block_kv))


# 3 -------------------------------------------------------------------------
@puzzle("flash.kv_loop")
@pytest.mark.parametrize("T, S, H, block_q, block_kv", [
    pytest.param(128, 384, 64, 128, 128, id="T=128 S=384 H=64 block_q=block_kv=128"),
    pytest.param(128, 128, 128, 128, 128, id="T=S=128 H=128 (one block each)"),
    pytest.param(128, 256, 64, 64, 128, id="T=128 S=256 block_q=64 block_kv=128"),
    pytest.param(2048, 4096, 128, 256, 512, id="T=2048 S=4096 H=128-tpu", marks=on_tpu),
])
def test_kv_loop(T, S, H, block_q, block_kv, rng):
    q, k, v = rng.normal((T, H)), rng.normal((S, H)), rng.normal((S, H))
    one = (None, None)   # one batch element, one head: [1, 1, T, H]
    ran = measure(flash.flash_one_head, q, k, v, block_q=block_q, block_kv=block_kv,
                  structure=ATTENTION.where(grid=(T // block_q,), blocks={"q": (block_q, H)}))
    check(ran, attention(q[one], k[one], v[one])[0][0, 0].astype(np.float32),
          blocks=(block_q, None), axes="T H", tolerance=1e-4,
          likely=lesson.kv_loop_mistakes(q, k, v, block_kv))
    blocks = (T // block_q) * (S // block_kv)
    check_work(ran, flops=lesson.dot_flops(blocks, 2, block_q, block_kv, H),
               likely={"first_kv_block_only": lesson.dot_flops(T // block_q, 2, block_q,
                                                               block_kv, H)})
    if S > block_kv:  # once per puzzle, to keep the run short
        lowers_for_tpu(ran)


# 4 -------------------------------------------------------------------------
@puzzle("flash.grid")
@pytest.mark.parametrize("B, N, T, S, H, dtype, rising", [
    pytest.param(1, 2, 128, 384, 128, "bfloat16", False, id="B=1 N=2 T=128 S=384 H=128 bf16"),
    pytest.param(1, 1, 128, 256, 128, "float32", True,
                 id="T=128 S=256 H=128, the last kv block's scores over 100 higher"),
    pytest.param(4, 16, 2048, 2048, 128, "bfloat16", False, id="B=4 N=16 T=S=2048 bf16-tpu",
                 marks=on_tpu),
])
def test_grid(B, N, T, S, H, dtype, rising, rng):
    """``rising``: a later kv block's scores exceed the first block's by more than exp's
    float32 range (88): the running max must move, and what was summed be rescaled."""
    q, k, v = inputs(rng, B, N, N, T, S, H, dtype)
    if rising:   # q . k / sqrt(H) = 2 x 5 x sqrt(128) = 113 on the last kv block
        q = np.full_like(q, 2)
        k[..., S - 128:, :] = 5
    ran = measure(flash.flash_grid, q, k, v, structure=grid_structure(B, N, T, S, H))
    check(ran, attention(q, k, v)[0].astype(dtype), blocks=(1, 1, 128, None), axes="B N T H",
          likely=lesson.grid_mistakes(q, k, v))
    lowers_for_tpu(ran)


def grid_structure(B, N, T, S, H, block_q=128, block_kv=128):
    return ATTENTION.where(grid=(B, N, T // block_q, S // block_kv),
                           blocks={"q": (None, None, block_q, H), "k": (None, None, block_kv, H)})


@puzzle("flash.grid")
@pytest.mark.parametrize("B, N, T, S, H", [
    pytest.param(2, 1, 256, 384, 64, id="B=2 N=1 T=256 S=384 H=64 (work and bytes counted)")])
def test_grid_reads_each_kv_block_once_per_q_block(B, N, T, S, H, rng):
    """Right values, every (q block, kv block) pair computed once, and K and V read
    once per q block."""
    q, k, v = inputs(rng, B, N, N, T, S, H)
    ran = measure(flash.flash_grid, q, k, v, structure=grid_structure(B, N, T, S, H))
    check(ran, attention(q, k, v)[0].astype(np.float32), blocks=(1, 1, 128, None),
          axes="B N T H", tolerance=1e-4, likely=lesson.grid_mistakes(q, k, v))
    check_work(ran, flops=lesson.dot_flops(B * N * (T // 128) * (S // 128), 2, 128, 128, H))
    # q read once, K and V once per q block (T // 128 times), o written once.
    reference = q.nbytes + (T // 128) * (k.nbytes + v.nbytes) + q.nbytes
    check_traffic(ran, reference=reference, minimum=q.nbytes + k.nbytes + v.nbytes + q.nbytes)


# 5 -------------------------------------------------------------------------
@puzzle("flash.causal")
@pytest.mark.parametrize("B, N, T, S, H, block_q, block_kv", [
    pytest.param(1, 1, 256, 384, 64, 128, 64,
                 id="T=256 S=384 H=64 block_q=128 block_kv=64 (keys 256.. never seen)"),
    pytest.param(2, 1, 256, 256, 64, 64, 128, id="B=2 T=S=256 H=64 block_q=64 block_kv=128"),
    pytest.param(1, 1, 128, 128, 128, 128, 128, id="T=S=128 H=128 (one block)"),
    # block_q = T = 9, a whole dim: kv block 1 starts at key 8, q block 0's last query,
    # so it holds exactly one visible key. Two heads: each reads its own K/V.
    pytest.param(1, 2, 9, 16, 64, 9, 8,
                 id="N=2 T=9 S=16 block_q=9 block_kv=8 (a block starts at the last query)"),
    pytest.param(4, 16, 4096, 4096, 128, 128, 128, id="B=4 N=16 T=S=4096-tpu", marks=on_tpu),
])
def test_causal(B, N, T, S, H, block_q, block_kv, rng):
    """Right values; the work of the blocks on or below the diagonal only (the others
    are skipped); and no K/V block fetched for a skipped step."""
    q, k, v = inputs(rng, B, N, N, T, S, H)
    ran = measure(flash.flash_causal, q, k, v, block_q=block_q, block_kv=block_kv,
                  structure=grid_structure(B, N, T, S, H, block_q, block_kv))
    check(ran, attention(q, k, v, causal=True)[0].astype(np.float32),
          blocks=(1, 1, block_q, None), axes="B N T H", tolerance=1e-4,
          likely=lesson.causal_mistakes(q, k, v, block_q, block_kv))
    if tpu_sized():  # values only
        return
    visible = len(lesson.visible_blocks(T, S, block_q, block_kv))
    every = (T // block_q) * (S // block_kv)
    check_work(ran, flops=lesson.dot_flops(B * N * visible, 2, block_q, block_kv, H),
               likely={"every_block_computed": lesson.dot_flops(B * N * every, 2, block_q,
                                                                block_kv, H)})
    reference, minimum = lesson.causal_traffic(q, k, block_q, block_kv)
    check_traffic(ran, reference=reference, minimum=minimum)
    lowers_for_tpu(ran)


# 6 -------------------------------------------------------------------------
@puzzle("flash.logsumexp")
@pytest.mark.parametrize("B, N, T, S, H, causal, kv_len, dtype, block_q, block_kv", [
    pytest.param(2, 1, 256, 256, 64, True, 200, "float32", 128, 128,
                 id="B=2 N=1 T=S=256 H=64 keys j<=i kv_len=200"),
    pytest.param(1, 1, 128, 128, 128, False, None, "bfloat16", 128, 128,
                 id="B=1 N=1 T=S=128 bf16"),
    pytest.param(1, 1, 9, 16, 64, True, None, "float32", 9, 8,
                 id="T=9 S=16 block_q=9 block_kv=8 keys j<=i (a block starts at the last query)"),
    pytest.param(4, 16, 4096, 4096, 128, True, 4000, "bfloat16", 128, 128,
                 id="B=4 N=16 T=S=4096 bf16 keys j<=i-tpu", marks=on_tpu),
])
def test_logsumexp(B, N, T, S, H, causal, kv_len, dtype, block_q, block_kv, rng):
    q, k, v = inputs(rng, B, N, N, T, S, H, dtype)
    expected_o, expected_lse = attention(q, k, v, causal=causal, kv_len=kv_len)
    ran = measure(flash.flash_forward, q, k, v, causal=causal, kv_len=kv_len,
                  block_q=block_q, block_kv=block_kv,
                  structure=grid_structure(B, N, T, S, H, block_q, block_kv).where(
                      outside={"slice"}))
    o, lse = ran.output
    check(o, expected_o.astype(dtype), blocks=(1, 1, 128, None), axes="B N T H",
          tolerance=1e-4 if dtype == "float32" else None,
          likely=lesson.logsumexp_mistakes(q, k, v, causal, kv_len, dtype))
    check(lse, expected_lse.astype(np.float32), name="lse", blocks=(1, 1, 128), axes="B N T",
          tolerance=1e-4, likely=lesson.lse_mistakes(q, k, causal, kv_len))
    if causal:  # once per puzzle, to keep the run short
        visible = len(lesson.visible_blocks(T, S, block_q, block_kv, causal))
        check_work(ran, flops=lesson.dot_flops(B * N * visible, 2, block_q, block_kv, H))
        lowers_for_tpu(ran)


# 7 -------------------------------------------------------------------------
@puzzle("flash.backward")
@pytest.mark.parametrize("B, N, T, S, H, causal, kv_len, dtype, block_q, block_kv", [
    pytest.param(2, 1, 256, 384, 64, True, 200, "float32", 128, 128,
                 id="B=2 N=1 T=256 S=384 H=64 keys j<=i kv_len=200"),
    pytest.param(1, 1, 128, 128, 128, False, None, "bfloat16", 128, 128,
                 id="B=1 N=1 T=S=128 bf16"),
    pytest.param(1, 1, 9, 16, 64, True, None, "float32", 9, 8,
                 id="T=9 S=16 block_q=9 block_kv=8 keys j<=i (a block starts at the last query)"),
    pytest.param(4, 16, 2048, 2048, 128, True, None, "bfloat16", 128, 128,
                 id="B=4 N=16 T=S=2048 bf16-tpu", marks=on_tpu),
])
def test_backward(B, N, T, S, H, causal, kv_len, dtype, block_q, block_kv, rng):
    q, k, v = inputs(rng, B, N, N, T, S, H, dtype)
    do = rng.normal((B, N, T, H), dtype)
    o, lse = attention(q, k, v, causal=causal, kv_len=kv_len)   # the forward's outputs, exact
    o, lse = o.astype(dtype), lse.astype(np.float32)
    ran = measure(flash.flash_backward, q, k, v, o, lse, do, causal=causal, kv_len=kv_len,
                  block_q=block_q, block_kv=block_kv,
                  structure=ATTENTION.where(kernels=2, outside=DELTA))
    dq, dk, dv = ran.output
    expected = attention_grads(q, k, v, do, causal=causal, kv_len=kv_len)
    likely = lesson.backward_mistakes(q, k, v, do, dtype, causal=causal, kv_len=kv_len)
    tolerance = 1e-4 if dtype == "float32" else 3e-2
    for n, (name, yours) in enumerate([("dq", dq), ("dk", dk), ("dv", dv)]):
        axes = "B N T H" if name == "dq" else "B N S H"
        check(yours, expected[n].astype(dtype), name=name, blocks=(1, 1, 128, None), axes=axes,
              tolerance=tolerance, likely=likely[n])
    if dtype != "float32" or (T, S) != (256, 384):   # the accounting below is for this one
        return
    # Every visible (q block, kv block) pair once in each kernel: the dQ kernel's 3
    # dots (s, dP, dQ), the dK/dV kernel's 4 (s, dV, dP, dK).
    visible = len(lesson.visible_blocks(T, S, 128, 128, causal))
    check_work(ran, flops=lesson.dot_flops(B * N * visible, 7, 128, 128, H))
    # Clamped index maps: no K/V block fetched that no query of the step needs.
    needed, minimum = lesson.backward_traffic(B, N, H)
    check_traffic(ran, reference=needed, minimum=minimum)
    lowers_for_tpu(ran)
    # jax.grad through flash_core runs the three kernels: traced and checked, not run
    # (puzzle 8 runs it on every kernel).
    check_structure(with_grads, q, k, v, do, attend=flash.flash_core, causal=causal,
                    structure=ATTENTION.where(kernels=3, outside=DELTA))


@puzzle("flash.gqa")
@pytest.mark.parametrize("N, K, block_q, block_kv", [
    pytest.param(4, 3, 128, 128, id="N=4 K=3 (K does not divide N)"),
    pytest.param(4, 2, 100, 128, id="block_q=100 (not a multiple of 8)"),
])
def test_gqa_checks_its_arguments(N, K, block_q, block_kv, rng):
    """Bad arguments fail up front, with a message, not deep inside a kernel."""
    q, k, v = inputs(rng, 1, N, K, 128, 128, 64)
    bad = f"N={N}, K={K}" if N % K else f"block_q={block_q}"
    lesson.check_attention_rejects(flash.flash_attention, bad, q, k, v, block_q=block_q,
                                   block_kv=block_kv)


# 8 -------------------------------------------------------------------------
@puzzle("flash.gqa")
@pytest.mark.parametrize("B, N, K, T, S, H, causal, dtype", [
    pytest.param(1, 4, 2, 100, 71, 64, True, "float32",
                 id="B=1 N=4 K=2 T=100 S=71 H=64 keys j<=i jax.grad (one padded key)"),
    pytest.param(1, 2, 1, 60, 255, 128, False, "bfloat16",
                 id="B=1 N=2 K=1 T=60 S=255 H=128 bf16 (one padded key)"),
    pytest.param(1, 2, 1, 64, 256, 64, False, "bfloat16",
                 id="B=1 N=2 K=1 T=64 S=256 H=64 bf16 (whole blocks: nothing to pad)"),
    pytest.param(4, 32, 8, 4096, 4096, 128, True, "bfloat16",
                 id="B=4 N=32 K=8 T=S=4096 bf16 keys j<=i-tpu", marks=on_tpu),
])
def test_gqa(B, N, K, T, S, H, causal, dtype, rng):
    q, k, v = inputs(rng, B, N, K, T, S, H, dtype)
    with_backward = dtype == "float32"    # the other configuration runs the forward only
    padding = {"pad", "slice"}   # to whole blocks, and back
    if with_backward:
        do = rng.normal((B, N, T, H), dtype)
        ran = measure(with_grads, q, k, v, do, attend=flash.flash_attention, causal=causal,
                      structure=ATTENTION.where(kernels=3, outside=DELTA | padding))
        o, dq, dk, dv = ran.output
    else:
        # Blocks shrink to the sequence rounded up to 8 rows, then the sequence is
        # padded to whole blocks: T=60 -> one 64-row q block, S=255 -> two 128-key
        # blocks. Two dots (s = q k^T, p v) per (q block, kv block) pair per head.
        block_q, block_kv = min(128, cdiv(T, 8) * 8), min(128, cdiv(S, 8) * 8)
        ran = measure(flash.flash_attention, q, k, v, causal=causal,
                      structure=grid_structure(B, N, cdiv(T, block_q) * block_q,
                                               cdiv(S, block_kv) * block_kv, H, block_q,
                                               block_kv).where(outside=padding))
        o = ran.output
        pairs = cdiv(T, block_q) * cdiv(S, block_kv)
        check_work(ran, flops=lesson.dot_flops(B * N * pairs, 2, block_q, block_kv, H))

    check(o, attention(q, k, v, causal=causal)[0].astype(dtype), blocks=(1, 1, 128, None),
          axes="B N T H", tolerance=1e-4 if with_backward else None,
          likely=lesson.gqa_mistakes(q, k, v, causal, dtype))
    if not with_backward:
        return
    expected = attention_grads(q, k, v, do, causal=causal)
    check(dq, expected[0].astype(dtype), name="dq", blocks=(1, 1, 128, None), axes="B N T H",
          tolerance=1e-4)
    for n, (name, yours) in enumerate([("dk", dk), ("dv", dv)], start=1):
        check(yours, per_group(expected[n], K).astype(dtype), name=name,
              blocks=(1, 1, 128, None), axes="B K S H", tolerance=1e-4,
              likely=lesson.group_mistakes(expected, n, K, dtype))
    lowers_for_tpu(ran)
