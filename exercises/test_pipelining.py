"""Tests for exercises/pipelining.py. Run them, don't edit them:

    pytest exercises/test_pipelining.py                      # all puzzles of the chapter
    pytest exercises/test_pipelining.py -k double_buffer     # one puzzle
    pytest exercises/test_pipelining.py -k double_buffer --hint

Each test compares your kernel with NumPy on at least two shapes (one an edge
case: one chunk, an odd number of chunks, a repeated index, a sequence that
ends mid-page or is empty), then checks that it would compile for a real TPU.
Every kernel here moves its data itself, so every test also counts the bytes
your DMAs move between HBM and VMEM, the VMEM your kernel takes (every buffer:
scratch, pl.run_scoped, two per BlockSpec'd operand) and, where the lesson is
overlap, how often the work ran while a copy was in flight. Before your kernel
runs, the kit pairs every .start() with its .wait():
a wait that would hang, a copy never waited, or a copy into a buffer that
another copy is still filling is named with its line. While it runs, interpret
mode reports a read of a buffer whose copy has not landed as a race. Tests
marked `tpu` run realistic sizes on a real TPU and are skipped elsewhere.
"""
import numpy as np
import pytest

from pytest_pallas_hints import (Structure, chapter, check, check_overlap, check_traffic,
                                 check_vmem, check_work, lowers_for_tpu, measure)
# The right answer of paged attention (float64 NumPy) and its inputs drawn:
from pytest_pallas_hints.lessons.pipelining import decode_attention, paged_inputs
# What the kit knows besides: your DMAs read from the run, known wrong answers, budgets.
from pytest_pallas_hints.lessons import pipelining as lesson

pipelining = chapter("pipelining")

puzzle = pytest.mark.puzzle
on_tpu = pytest.mark.tpu

# What each lesson requires of your program, checked from its trace: one kernel
# of your own that starts DMAs and waits for them, with the puzzle's work inside
# it; nothing but reshapes around it.
MANUAL = Structure(inside={"dma_start", "dma_wait"})


# 1 -------------------------------------------------------------------------
@puzzle("pipelining.one_copy")
@pytest.mark.parametrize("M, D, dtype", [
    pytest.param(24, 256, "float32", id="M=24 D=256"),
    pytest.param(16, 128, "bfloat16", id="M=16 D=128 bf16 (one tile)"),
    pytest.param(1024, 1024, "float32", id="M=1024 D=1024-tpu", marks=on_tpu),
])
def test_one_copy(M, D, dtype, rng):
    x = rng.normal((M, D), dtype)
    ran = measure(pipelining.add_one, x, structure=MANUAL.where(
        inside={"dma_start", "dma_wait", "add"}))
    check(ran, x + np.asarray(1, dtype), likely={"not_added": x})
    lesson.check_own_copies(ran, read=x.nbytes)
    check_traffic(ran, reference=2 * x.nbytes, minimum=2 * x.nbytes)
    lowers_for_tpu(ran)


# 2 -------------------------------------------------------------------------
@puzzle("pipelining.copy_loop")
@pytest.mark.parametrize("S, D, chunk, dtype", [
    pytest.param(64, 256, 16, "float32", id="S=64 D=256 chunk=16"),
    pytest.param(32, 128, 32, "float32", id="S=32 D=128 chunk=32 (a single chunk)"),
    pytest.param(128, 128, 16, "bfloat16", id="S=128 D=128 chunk=16 bf16 (8 chunks)"),
    pytest.param(65536, 1024, 512, "float32", id="S=65536 D=1024 chunk=512-tpu", marks=on_tpu),
])
def test_copy_loop(S, D, chunk, dtype, rng):
    x = rng.normal((S, D), dtype)
    ran = measure(pipelining.column_sum, x, chunk=chunk, structure=MANUAL.where(
        inside={"dma_start", "dma_wait", "reduce_sum"}))
    lesson.check_rows_copied_once(ran, x, chunk=chunk)
    check(ran, x.astype(np.float64).sum(axis=0, keepdims=True).astype(dtype),
          tolerance=1e-4 if dtype == "float32" else None,
          likely=lesson.column_sum_mistakes(x, chunk))
    lesson.check_own_copies(ran, read=x.nbytes, copies=S // chunk)
    check_vmem(ran, most=chunk * D * x.itemsize + 2 * D * x.itemsize + 4 * D,
               why="one chunk at a time needs one chunk of VMEM (and the (1, D) output, "
                   "and at most a (1, D) float32 running total).")
    check_traffic(ran, reference=x.nbytes + D * x.itemsize, minimum=x.nbytes + D * x.itemsize)
    lowers_for_tpu(ran)


# 3 -------------------------------------------------------------------------
@puzzle("pipelining.double_buffer")
@pytest.mark.parametrize("S, D, chunk", [
    pytest.param(64, 256, 16, id="S=64 D=256 chunk=16"),
    pytest.param(24, 128, 8, id="S=24 D=128 chunk=8 (an odd number of steps)"),
    pytest.param(65536, 1024, 512, id="S=65536 D=1024 chunk=512-tpu", marks=on_tpu),
])
def test_double_buffer(S, D, chunk, rng):
    x = rng.normal((S, D))
    ran = measure(pipelining.column_sum_double_buffered, x, chunk=chunk,
                  structure=MANUAL.where(inside={"dma_start", "dma_wait", "reduce_sum"}))
    lesson.check_rows_copied_once(ran, x, chunk=chunk)
    check(ran, x.astype(np.float64).sum(axis=0, keepdims=True).astype(np.float32),
          tolerance=1e-4, likely=lesson.column_sum_mistakes(x, chunk))
    lesson.check_own_copies(ran, read=x.nbytes, copies=S // chunk)
    check_overlap(ran, work="reduce_sum", at_least=S // chunk - 1, why=(
        "Start the copy of chunk i + 1 into the other slot before you wait for chunk i, "
        "so that it lands while chunk i is summed."))
    check_vmem(ran, most=2 * chunk * D * x.itemsize + 2 * D * x.itemsize,
               why="two slots of one chunk each (and the (1, D) output).")
    check_traffic(ran, reference=x.nbytes + D * x.itemsize, minimum=x.nbytes + D * x.itemsize)
    lowers_for_tpu(ran)


# 4 -------------------------------------------------------------------------
@puzzle("pipelining.write_back")
@pytest.mark.parametrize("S, D, chunk", [
    pytest.param(64, 256, 16, id="S=64 D=256 chunk=16"),
    pytest.param(16, 128, 16, id="S=16 D=128 chunk=16 (a single chunk)"),
    pytest.param(65536, 1024, 512, id="S=65536 D=1024 chunk=512-tpu", marks=on_tpu),
])
def test_write_back(S, D, chunk, rng):
    x = rng.normal((S, D))
    ran = measure(pipelining.relu, x, chunk=chunk, structure=MANUAL.where(
        inside={"dma_start", "dma_wait", "max"}))
    lesson.check_rows_copied_once(ran, x, chunk=chunk)
    check(ran, np.maximum(x, 0), blocks=(chunk, None), axes="S D",
          likely=lesson.write_back_mistakes(x, chunk))
    lesson.check_own_copies(ran, read=x.nbytes, written=x.nbytes, copies=S // chunk)
    if S // chunk > 1:
        lesson.check_in_flight(ran, at_least=2, why=(
            "Start the write-back of chunk i and move on without waiting: it lands while "
            "chunk i + 1 is read, and is waited at the next step, before the output buffer "
            "is overwritten."))
        check_overlap(ran, work="max", at_least=S // chunk - 1, why=(
            "The relu of chunk i can be computed while the write-back of chunk i - 1 is "
            "still landing: wait for that write only when out_vmem is about to be "
            "overwritten, after computing the chunk."))
    check_vmem(ran, most=2 * chunk * D * x.itemsize,
               why="one chunk in and one chunk out.")
    check_traffic(ran, reference=2 * x.nbytes, minimum=2 * x.nbytes)
    lowers_for_tpu(ran)


# 5 -------------------------------------------------------------------------
@puzzle("pipelining.gather")
@pytest.mark.parametrize("V, D, T, rows_per_step", [
    pytest.param(64, 256, 16, 8, id="V=64 D=256 T=16 rows_per_step=8"),
    pytest.param(16, 128, 8, 8, id="V=16 D=128 T=8 (one step, a row twice, the last row)"),
    pytest.param(32768, 1024, 4096, 64, id="V=32768 D=1024 T=4096-tpu", marks=on_tpu),
])
def test_gather(V, D, T, rows_per_step, rng):
    table = rng.normal((V, D))
    ids = rng.integers((T,), 0, V)
    if T <= 8:   # the edge case: a repeated row and the very last one
        ids[1], ids[-1] = ids[0], V - 1
    ran = measure(pipelining.gather_rows, table, ids, rows_per_step=rows_per_step,
                  structure=MANUAL.where(prefetch=True, grid=(T // rows_per_step,)))
    check(ran, table[ids], blocks=(rows_per_step, None), axes="T D",
          likely=lesson.gather_mistakes(table, ids, rows_per_step))
    row = D * table.itemsize
    lesson.check_own_copies(ran, read=T * row, what="the table")
    lesson.check_in_flight(ran, at_least=rows_per_step, why=(
        "Start every row's copy of a step before waiting for any: the rows then land "
        "together, in the time of about one, instead of one after another."))
    check_vmem(ran, most=3 * rows_per_step * row, why=(
        "one step's rows (and the output block, twice)."))
    check_traffic(ran, reference=2 * T * row, minimum=2 * T * row)
    lowers_for_tpu(ran)


# 6 -------------------------------------------------------------------------
@puzzle("pipelining.emit_pipeline")
@pytest.mark.parametrize("S, D, chunk", [
    pytest.param(64, 256, 16, id="S=64 D=256 chunk=16"),
    pytest.param(24, 128, 8, id="S=24 D=128 chunk=8 (an odd number of steps)"),
    pytest.param(65536, 1024, 512, id="S=65536 D=1024 chunk=512-tpu", marks=on_tpu),
])
def test_emit_pipeline(S, D, chunk, rng):
    x = rng.normal((S, D))
    ran = measure(pipelining.column_sum_pipelined, x, chunk=chunk,
                  structure=MANUAL.where(inside={"emit_pipeline", "reduce_sum"}))
    lesson.check_rows_copied_once(ran, x, chunk=chunk)
    check(ran, x.astype(np.float64).sum(axis=0, keepdims=True).astype(np.float32),
          tolerance=1e-4, likely=lesson.column_sum_mistakes(x, chunk))
    lesson.check_own_copies(ran, read=x.nbytes, copies=S // chunk,
                            how="through the copies pltpu.emit_pipeline makes for its "
                                "BlockSpecs")
    check_overlap(ran, work="reduce_sum", at_least=S // chunk - 1, why=(
        "pltpu.emit_pipeline double-buffers every BlockSpec it is given: hand it the "
        "whole HBM array and a (chunk, D) BlockSpec, and let it do the copies."))
    check_vmem(ran, most=2 * chunk * D * x.itemsize + D * 4 + 2 * D * x.itemsize,
               why="the pipeline's two (chunk, D) slots, the (1, D) total and the output.")
    check_traffic(ran, reference=x.nbytes + D * x.itemsize, minimum=x.nbytes + D * x.itemsize)
    lowers_for_tpu(ran)


# 7 -------------------------------------------------------------------------
PAGED = MANUAL.where(inside={"dma_start", "dma_wait", "dot_general", "exp"}, prefetch=True)


@puzzle("pipelining.paged_attention")
@pytest.mark.parametrize("B, N, K, H, L, pages_per_sequence, pages_per_block, lengths, dtype", [
    pytest.param(4, 4, 2, 128, 8, 4, 2, (1, 24, 13, 0), "float32",
                 id="B=4 N=4 K=2 H=128 L=8 pages_per_block=2 lengths=1,24,13,0 "
                    "(sequence 2's scores near -300)"),
    pytest.param(2, 2, 2, 128, 16, 4, 1, (17, 64), "bfloat16",
                 id="B=2 N=K=2 L=16 pages_per_block=1 lengths=17,64 bf16"),
    pytest.param(16, 32, 8, 128, 16, 64, 8, tuple(range(1, 1025, 64)), "bfloat16",
                 id="B=16 N=32 K=8 L=16 pages_per_block=8 bf16-tpu", marks=on_tpu),
])
def test_paged_attention(B, N, K, H, L, pages_per_sequence, pages_per_block, lengths, dtype,
                         rng):
    q, k_pages, v_pages, page_indices = paged_inputs(
        rng, B, N, K, H, L, pages_per_sequence, dtype, far_below=2 if B > 2 else None)
    lengths = np.asarray(lengths, np.int32)
    ran = measure(pipelining.paged_attention, q, k_pages, v_pages, lengths, page_indices,
                  pages_per_block=pages_per_block, structure=PAGED.where(grid=(B, K)))
    lesson.check_empty_sequences(ran, lengths)
    check(ran, decode_attention(q, k_pages, v_pages, lengths, page_indices).astype(dtype),
          blocks=(1, None, None), axes="B N H", tolerance=2e-4 if dtype == "float32" else None,
          likely=lesson.paged_mistakes(q, k_pages, v_pages, lengths, page_indices,
                                       pages_per_block, dtype))
    budget = lesson.paged_budget(q, k_pages, lengths, pages_per_block, pages_per_sequence)
    check_work(ran, flops=budget.flops, likely={"every_block": budget.every_block})
    check_traffic(ran, reference=budget.bytes, minimum=budget.bytes)
    check_vmem(ran, most=budget.vmem, why=(
        "two slots of one block of pages, for K and for V (and the q and output blocks): "
        "a sequence's pages are streamed a block at a time, never all fetched up front."))
    if budget.most_blocks > 1:
        check_overlap(ran, work="dot_general", at_least=budget.overlapped, why=(
            "Start the pages of block i + 1 into the other slot before you wait for the "
            "pages of block i: block i's scores and p @ v are then computed while the next "
            "pages land."))
    lowers_for_tpu(ran)


@puzzle("pipelining.paged_attention")
@pytest.mark.parametrize("N, K, pages_per_block", [
    pytest.param(4, 3, 1, id="N=4 K=3 (K does not divide N)"),
    pytest.param(4, 2, 3, id="pages_per_block=3 (does not divide pages_per_sequence=4)"),
])
def test_paged_attention_checks_its_arguments(N, K, pages_per_block, rng):
    """Bad arguments fail up front, with a message that names the argument."""
    q, k_pages, v_pages, page_indices = paged_inputs(rng, 2, N, K, 128, 8, 4, "float32")
    lengths = np.array([8, 3], np.int32)
    bad, name = (f"N={N}, K={K}", "K") if N % K else (f"pages_per_block={pages_per_block}",
                                                     "pages_per_block")
    lesson.check_paged_rejects(pipelining.paged_attention, bad, name, q, k_pages, v_pages,
                               lengths, page_indices, pages_per_block=pages_per_block)
