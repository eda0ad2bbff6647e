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

from pytest_pallas_hints import (Structure, cdiv, chapter, check, check_overlap,
                                 check_traffic, check_vmem, check_work, fail, lowers_for_tpu,
                                 measure)
from pytest_pallas_hints.lessons.pipelining import (
    check_column_sum, check_empty_sequences, check_in_flight, check_own_copies,
    check_rows_copied_once, decode_attention, last_block_only, m_starts_at_zero, paged_inputs)

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
    check_own_copies(ran, read=x.nbytes)
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
    check_rows_copied_once(ran, x, chunk=chunk)
    check_column_sum(ran, x, chunk)
    check_own_copies(ran, read=x.nbytes, copies=S // chunk)
    check_vmem(ran, most=chunk * D * x.itemsize + 2 * D * x.itemsize,
               why="one chunk at a time needs one chunk of VMEM (and the (1, D) output).")
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
    check_rows_copied_once(ran, x, chunk=chunk)
    check_column_sum(ran, x, chunk)
    check_own_copies(ran, read=x.nbytes, copies=S // chunk)
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
    check_rows_copied_once(ran, x, chunk=chunk)
    steps = np.arange(S) // chunk

    def shifted():   # chunk i's rows hold chunk i + 1's result (written after it)
        later = np.minimum(steps + 1, S // chunk - 1)
        return np.maximum(x.reshape(-1, chunk, D)[later[::chunk]].reshape(S, D), 0)

    check(ran, np.maximum(x, 0), blocks=(chunk, None), axes="S D",
          likely={"relu_missing": x, "shifted": shifted})
    check_own_copies(ran, read=x.nbytes, written=x.nbytes, copies=S // chunk)
    if S // chunk > 1:
        check_in_flight(ran, at_least=2, why=(
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
    first_step = np.resize(ids[:rows_per_step], T)
    check(ran, table[ids], blocks=(rows_per_step, None), axes="T D",
          likely={"first_step_ids": table[first_step], "rows_in_order": table[:T]})
    row = D * table.itemsize
    check_own_copies(ran, read=T * row, what="the table")
    check_in_flight(ran, at_least=rows_per_step, why=(
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
    check_rows_copied_once(ran, x, chunk=chunk)
    check_column_sum(ran, x, chunk)
    check_own_copies(ran, read=x.nbytes, copies=S // chunk,
                     how="through the copies pltpu.emit_pipeline makes for its BlockSpecs")
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
    args = (q, k_pages, v_pages, lengths, page_indices)
    tokens_per_block = pages_per_block * L

    def seeing(visible=None, **options):
        return lambda: decode_attention(*args, visible=visible, **options).astype(dtype)

    def with_args(**changed):   # the truth of other inputs: a near-miss's answer
        given = dict(zip(("q", "k_pages", "v_pages", "lengths", "page_indices"), args))
        return lambda: decode_attention(**dict(given, **changed)).astype(dtype)

    check_empty_sequences(ran, lengths)
    check(ran, decode_attention(*args).astype(dtype), blocks=(1, None, None), axes="B N H",
          tolerance=2e-4 if dtype == "float32" else None,
          likely={"mask_missing": seeing(lambda b: cdiv(lengths[b], L) * L),
                  "block_not_masked": seeing(
                      lambda b: cdiv(lengths[b], tokens_per_block) * tokens_per_block),
                  "head_modulo": seeing(head_of=lambda n: n % K),
                  "first_block_only": seeing(lambda b: min(lengths[b], tokens_per_block)),
                  "last_block_only": lambda: last_block_only(*args, tokens_per_block, dtype),
                  "one_token_too_many": seeing(lambda b: min(lengths[b] + 1, pages_per_sequence
                                                             * L) if lengths[b] else 0),
                  "v_is_k": with_args(v_pages=k_pages),
                  "q_scaled": with_args(q=q.astype(np.float64) / np.sqrt(H)),
                  "page_table_row_0": with_args(page_indices=np.repeat(page_indices[:1], B, 0)),
                  "m_starts_at_zero": lambda: m_starts_at_zero(*args, dtype)})
    G, itemsize = N // K, q.itemsize
    blocks = [cdiv(n, tokens_per_block) for n in lengths]
    every = B * (pages_per_sequence // pages_per_block)
    block_flops = 2 * (2 * G * tokens_per_block * H)   # scores and p @ v
    check_work(ran, flops=K * sum(blocks) * block_flops,
               likely={"every_block": K * every * block_flops})
    page = L * H * itemsize
    pages = [cdiv(n, L) for n in lengths]
    needed = 2 * q.nbytes + 2 * K * sum(pages) * page          # q in, o out, K and V pages
    check_traffic(ran, reference=needed, minimum=needed)
    two_slots = 2 * 2 * pages_per_block * page          # K and V, two slots each
    check_vmem(ran, most=two_slots + 2 * 2 * G * H * itemsize, why=(
        "two slots of one block of pages, for K and for V (and the q and output blocks): "
        "a sequence's pages are streamed a block at a time, never all fetched up front."))
    if max(blocks) > 1:
        check_overlap(ran, work="dot_general",
                      at_least=2 * K * sum(max(n - 1, 0) for n in blocks), why=(
                          "Start the pages of block i + 1 into the other slot before you "
                          "wait for the pages of block i: block i's scores and p @ v are "
                          "then computed while the next pages land."))
    lowers_for_tpu(ran)


@puzzle("pipelining.paged_attention")
@pytest.mark.parametrize("N, K, pages_per_block", [
    pytest.param(4, 3, 1, id="N=4 K=3 (K does not divide N)"),
    pytest.param(4, 2, 3, id="pages_per_block=3 (does not divide pages_per_sequence=4)"),
])
def test_paged_attention_checks_its_arguments(N, K, pages_per_block, rng):
    """Bad arguments fail up front, with a message that names the argument."""
    import jax

    q, k_pages, v_pages, page_indices = paged_inputs(rng, 2, N, K, 128, 8, 4, "float32")
    lengths = np.array([8, 3], np.int32)
    bad, name = (f"N={N}, K={K}", "K") if N % K else (f"pages_per_block={pages_per_block}",
                                                     "pages_per_block")
    try:
        jax.eval_shape(lambda *a: pipelining.paged_attention(
            *a, pages_per_block=pages_per_block), q, k_pages, v_pages, lengths, page_indices)
    except ValueError as error:
        if name in str(error):
            return
        fail("argument_check", f"paged_attention({bad}) raised a ValueError that does not "
             f"name {name}.", [("called", f"paged_attention({bad})"),
                               ("raised", str(error)[:200])])
    except NotImplementedError:
        raise
    except Exception as error:
        fail("argument_check", f"paged_attention({bad}) should raise a ValueError that names "
             "the argument before any kernel is built; it failed later, inside JAX.",
             [("called", f"paged_attention({bad})"),
              ("raised", f"{type(error).__name__}: {str(error).splitlines()[0][:200]}")])
    fail("argument_check", f"paged_attention({bad}) should raise a ValueError that names the "
         "argument; it raised nothing.", [("called", f"paged_attention({bad})"),
                                          ("raised", "nothing")])
