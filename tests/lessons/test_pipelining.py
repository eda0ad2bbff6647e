"""The pipelining chapter's lesson machinery (pytest_pallas_hints/lessons/pipelining.py)
on its own: what it reads of the learner's DMAs, the checks it words from that, the
known-wrong answers, decode attention and the paged budget, each against a small case
worked by hand or an independent computation (reference/pipelining.py's kernels
measured, a known mistake's functions run in their place)."""
import types
from pathlib import Path

import numpy as np
import pytest

from pytest_pallas_hints import Rng, runtime
from pytest_pallas_hints.checking import Diagnosed, measure
from pytest_pallas_hints.lessons import pipelining as lesson

ROOT = Path(__file__).resolve().parents[2]


def reference(*mistakes):
    """reference/pipelining.py as a module of its own, the functions of the known
    mistakes tests/mistakes/pipelining/<name>.py in place of the reference's."""
    module = types.ModuleType("reference_pipelining_" + "_".join(mistakes))
    for path in [ROOT / "reference" / "pipelining.py",
                 *(ROOT / "tests" / "mistakes" / "pipelining" / f"{m}.py" for m in mistakes)]:
        module.__file__ = str(path)
        exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


REFERENCE = reference()


@pytest.fixture(autouse=True)
def interpret_mode():
    runtime.use_interpret_mode(True)


@pytest.fixture(autouse=True)
def no_chapter_loaded(monkeypatch):
    """The kernels here come from files the tests load themselves."""
    from pytest_pallas_hints import chapters

    monkeypatch.setattr(chapters, "_loaded", set())


def close(yours, expected, rtol=1e-5):
    np.testing.assert_allclose(np.asarray(yours, np.float64), np.asarray(expected, np.float64),
                               rtol=rtol, atol=rtol, equal_nan=True)


def kind_of(check, *args, **options) -> str:
    """The finding a check gives (empty when it passes)."""
    try:
        check(*args, **options)
    except Diagnosed as failure:
        return failure.kind
    return ""


def operand(name, direction, nbytes, copies):
    return types.SimpleNamespace(name=name, direction=direction, bytes=nbytes, copies=copies)


def run_of(*operands, in_flight=(1,), copies=None):
    """A measured run as far as the checks read it: its traffic's operands, the most
    copies in flight per kernel run, and copies_of."""
    return types.SimpleNamespace(
        traffic=types.SimpleNamespace(operands=list(operands)),
        counts=[types.SimpleNamespace(most_in_flight=n) for n in in_flight],
        copies_of=lambda array: copies)


# --- what the DMAs did -----------------------------------------------------------

def test_dma_traffic_and_in_flight_of_the_reference_kernels(rng):
    x = rng.normal((64, 256))
    ran = measure(REFERENCE.add_one, x, structure=None)
    assert lesson.dma_traffic(ran, "read") == (x.nbytes, 1)
    assert lesson.dma_traffic(ran, "written") == (0, 0)   # o goes out through its BlockSpec
    assert lesson.in_flight(ran) == 1
    ran = measure(REFERENCE.column_sum_double_buffered, x, chunk=16, structure=None)
    assert lesson.dma_traffic(ran, "read") == (x.nbytes, 4)
    assert lesson.in_flight(ran) == 2
    ran = measure(REFERENCE.relu, x, chunk=16, structure=None)
    assert lesson.dma_traffic(ran, "written") == (x.nbytes, 4)


def test_dma_traffic_counts_only_the_kernels_own_dmas():
    ran = run_of(operand("DMA any -> vmem", "read", 100, 2), operand("x", "read", 7, 1),
                 operand("DMA vmem -> any", "written", 30, 3),
                 operand("DMA any -> vmem", "read", 5, 1), in_flight=(1, 3, 2))
    assert lesson.dma_traffic(ran, "read") == (105, 3)
    assert lesson.dma_traffic(ran, "written") == (30, 3)
    assert lesson.in_flight(ran) == 3


def test_check_own_copies_words():
    by_hand = run_of(operand("DMA any -> vmem", "read", 64, 4))
    assert kind_of(lesson.check_own_copies, by_hand, read=64, copies=4) == ""
    assert kind_of(lesson.check_own_copies, by_hand, read=128) == "not_by_hand"
    assert kind_of(lesson.check_own_copies, by_hand, read=64, written=64) == "not_by_hand"
    assert kind_of(lesson.check_own_copies, by_hand, read=64, copies=8) == "copies"
    assert kind_of(lesson.check_own_copies, by_hand, read=64, copies=2) == "copies_many"
    blockspec = run_of(operand("x", "read", 64, 1))
    with pytest.raises(Diagnosed) as failed:
        lesson.check_own_copies(blockspec, read=64, what="the table", how="by hand")
    assert "your own DMAs moved 0 B HBM -> VMEM, the puzzle's copies move 64 B: the table " \
           "must stay in HBM" in failed.value.says and "travel by hand" in failed.value.says


def test_check_rows_copied_once_and_spans():
    x = np.zeros((8, 2))
    once = np.ones((8, 2), int)
    assert kind_of(lesson.check_rows_copied_once, run_of(copies=once), x, chunk=4) == ""
    assert kind_of(lesson.check_rows_copied_once, run_of(copies=0 * once), x, chunk=4) == ""
    wrong = once.copy()
    wrong[4:6], wrong[0:2] = 0, 2
    wrong[7, 1] = 0                       # a row partly read is not read (min over D)
    with pytest.raises(Diagnosed) as failed:
        lesson.check_rows_copied_once(run_of(copies=wrong), x, chunk=4)
    assert failed.value.kind == "coverage"
    assert failed.value.facts == [("never read", "rows 4-5, 7"), ("read twice", "rows 0-1")]
    assert lesson.spans([3]) == "rows 3"
    assert lesson.spans([0, 1, 2, 5, 7, 8]) == "rows 0-2, 5, 7-8"


def test_check_rows_copied_once_on_a_kernel_that_reads_chunk_0_every_time(rng):
    x = rng.normal((64, 256))
    ran = measure(reference("copy_loop_same_chunk").column_sum, x, chunk=16, structure=None)
    with pytest.raises(Diagnosed) as failed:
        lesson.check_rows_copied_once(ran, x, chunk=16)
    assert failed.value.facts == [("never read", "rows 16-63"), ("read twice", "rows 0-15")]
    lesson.check_rows_copied_once(measure(REFERENCE.column_sum, x, chunk=16, structure=None),
                                  x, chunk=16)


def test_check_in_flight():
    assert kind_of(lesson.check_in_flight, run_of(in_flight=(1, 2)), at_least=2, why="") == ""
    with pytest.raises(Diagnosed) as failed:
        lesson.check_in_flight(run_of(in_flight=(1, 1)), at_least=2, why="Overlap them.")
    assert failed.value.kind == "copies_not_overlapped"
    assert failed.value.says.endswith("has 2. Overlap them.")


# --- known wrong answers -----------------------------------------------------------

def test_column_sum_mistakes_by_hand():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)   # chunks of 2 rows: sums (2, 4),
    likely = lesson.column_sum_mistakes(x, 2)            # (10, 12), (18, 20)
    assert likely["first_chunk_only"].tolist() == [[6, 12]]
    assert likely["last_chunk_only"].tolist() == [[18, 20]]
    assert likely["last_chunk_only"].dtype == np.float32


def test_column_sum_first_chunk_only_is_the_kernel_that_reads_chunk_0(rng):
    x = rng.normal((64, 256))
    yours = measure(reference("copy_loop_same_chunk").column_sum, x, chunk=16,
                    structure=None).output
    close(yours, lesson.column_sum_mistakes(x, 16)["first_chunk_only"], rtol=1e-5)


def test_write_back_mistakes_by_hand():
    x = np.array([[-1.0], [2.0], [3.0], [-4.0], [5.0], [-6.0]])
    likely = lesson.write_back_mistakes(x, 2)
    assert likely["relu_missing"] is x
    # chunk i's rows hold chunk i + 1's relu; the last chunk its own
    assert likely["shifted"]().ravel().tolist() == [3, 0, 5, 0, 5, 0]


def test_gather_mistakes(rng):
    table = np.arange(10.0)[:, None] * np.ones((1, 4))
    ids = np.array([7, 2, 9, 4, 0, 1], np.int32)
    likely = lesson.gather_mistakes(table, ids, 2)
    assert likely["first_step_ids"][:, 0].tolist() == [7, 2, 7, 2, 7, 2]
    assert likely["rows_in_order"][:, 0].tolist() == [0, 1, 2, 3, 4, 5]
    table = rng.normal((64, 256))
    ids = rng.integers((16,), 0, 64)
    yours = measure(reference("gather_first_step_ids").gather_rows, table, ids,
                    rows_per_step=8, structure=None).output
    close(yours, lesson.gather_mistakes(table, ids, 8)["first_step_ids"])


# --- paged attention --------------------------------------------------------------

def test_paged_inputs_keep_their_promises():
    q, k_pages, v_pages, page_indices = lesson.paged_inputs(Rng(0), 4, 4, 2, 128, 8, 4,
                                                            "float32", far_below=2)
    assert q.shape == (4, 4, 128) and k_pages.shape == v_pages.shape == (2, 32, 8, 128)
    assert page_indices.shape == (4, 4) and page_indices.dtype == np.int32
    assert len(set(page_indices.ravel().tolist())) == 16 and page_indices.max() < 32
    scores = np.einsum("nh,kth->nkt", q[2], k_pages[:, page_indices[2]].reshape(2, -1, 128))
    assert scores.max() < -150   # sequence 2: every score far below zero


def test_decode_attention_is_the_reference_kernel(rng):
    B, N, K, H, L = 3, 4, 2, 128, 8
    q, k_pages, v_pages, page_indices = lesson.paged_inputs(rng, B, N, K, H, L, 4, "float32")
    lengths = np.array([1, 32, 13], np.int32)
    ran = measure(REFERENCE.paged_attention, q, k_pages, v_pages, lengths, page_indices,
                  pages_per_block=2, structure=None)
    close(ran.output, lesson.decode_attention(q, k_pages, v_pages, lengths, page_indices),
          rtol=2e-4)


def test_decode_attention_by_hand(rng):
    """Sequence b's K/V are its pages in page-table order, its first lengths[b] tokens;
    head_of picks the K/V head; visible overrides the length; length 0 gives zeros."""
    B, N, K, H, L = 2, 2, 2, 4, 2
    q, k_pages, v_pages, page_indices = lesson.paged_inputs(rng, B, N, K, H, L, 2, "float32")
    lengths = np.array([3, 0], np.int32)
    o = lesson.decode_attention(q, k_pages, v_pages, lengths, page_indices)
    assert (o[1] == 0).all()
    for n in range(N):
        k = np.concatenate([k_pages[n, p] for p in page_indices[0]])[:3].astype(np.float64)
        v = np.concatenate([v_pages[n, p] for p in page_indices[0]])[:3].astype(np.float64)
        s = k @ q[0, n]
        p = np.exp(s - s.max())
        close(o[0, n], p @ v / p.sum())
    swapped = lesson.decode_attention(q, k_pages[::-1], v_pages[::-1], lengths, page_indices)
    close(lesson.decode_attention(q, k_pages, v_pages, lengths, page_indices,
                                  head_of=lambda n: 1 - n), swapped)
    close(lesson.decode_attention(q, k_pages, v_pages, lengths, page_indices,
                                  visible=lambda b: 3 if b == 0 else 0), o)
    close(lesson.attend(q[0], np.stack([np.concatenate([k_pages[n, p] for p in page_indices[0]])
                                        [:3] for n in range(K)]),
                        np.stack([np.concatenate([v_pages[n, p] for p in page_indices[0]])
                                  [:3] for n in range(K)])), o[0])


PAGED = dict(B=4, N=4, K=2, H=128, L=8, pages_per_sequence=4, pages_per_block=2)


def paged_case(far_below=None, lengths=(1, 24, 13, 0)):
    c = PAGED
    q, k_pages, v_pages, page_indices = lesson.paged_inputs(
        Rng(5), c["B"], c["N"], c["K"], c["H"], c["L"], c["pages_per_sequence"], "float32",
        far_below=far_below)
    return q, k_pages, v_pages, np.asarray(lengths, np.int32), page_indices


@pytest.mark.parametrize("known, likely", [
    ("paged_attention_heads_strided", "head_modulo"),
    ("paged_attention_masks_pages_not_tokens", "mask_missing"),
    ("paged_q_scaled", "q_scaled"),
    ("paged_v_from_k_pages", "v_is_k"),
    ("paged_pages_of_sequence_0", "page_table_row_0"),
    ("paged_m_starts_at_zero", "m_starts_at_zero"),
])
def test_paged_mistakes_are_the_mistakes(known, likely):
    args = paged_case(far_below=2 if likely == "m_starts_at_zero" else None)
    yours = measure(reference(known).paged_attention, *args, pages_per_block=2,
                    structure=None).output
    model = lesson.paged_mistakes(*args, 2, np.float32)[likely]()
    lengths = args[3]
    close(np.asarray(yours)[lengths > 0], model[lengths > 0], rtol=2e-4)


def test_paged_mistakes_by_hand():
    args = paged_case()
    q, k_pages, v_pages, lengths, page_indices = args
    likely = lesson.paged_mistakes(*args, 2, np.float64)
    seeing = {"mask_missing": [8, 24, 16, 0], "block_not_masked": [16, 32, 16, 0],
              "first_block_only": [1, 16, 13, 0], "one_token_too_many": [2, 25, 14, 0]}
    for name, tokens in seeing.items():
        close(likely[name](), lesson.decode_attention(*args, visible=lambda b: tokens[b]))
    # the last block only: sequence 1 (24 tokens, blocks of 16) sees tokens 16..23
    K, H = 2, 128
    k = k_pages[:, page_indices[1]].reshape(K, -1, H)[:, 16:24]
    v = v_pages[:, page_indices[1]].reshape(K, -1, H)[:, 16:24]
    close(likely["last_block_only"]()[1], lesson.attend(q[1], k, v))
    close(likely["last_block_only"]()[[0, 2]],
          lesson.decode_attention(*args)[[0, 2]])   # one block each: the same


def test_m_starts_at_zero_zeroes_the_sequences_far_below_only():
    args = paged_case(far_below=2)
    wrong = lesson.m_starts_at_zero(*args, np.float32)
    right = lesson.decode_attention(*args)
    assert (wrong[2] == 0).all()
    close(wrong[[0, 1, 3]], right[[0, 1, 3]])


def test_paged_budget_is_what_the_reference_does():
    args = paged_case()
    q, k_pages, _, lengths, _ = args
    ran = measure(REFERENCE.paged_attention, *args, pages_per_block=2, structure=None)
    budget = lesson.paged_budget(q, k_pages, lengths, 2, 4)
    assert ran.work == budget.flops
    assert ran.traffic.total == budget.bytes
    assert max(found.total for found in ran.vmem) == budget.vmem
    assert sum(counts.overlapped.get("dot_general", 0) for counts in ran.counts) \
        == budget.overlapped
    # by hand: blocks of 16 tokens, lengths 1, 24, 13, 0 -> 1 + 2 + 1 + 0 blocks, at most 2
    G, tokens = 2, 16
    assert budget.flops == 2 * 4 * (2 * (2 * G * tokens * 128))
    assert budget.every_block == 2 * 8 * (2 * (2 * G * tokens * 128))
    assert budget.most_blocks == 2 and budget.overlapped == 2 * 2 * 1
    page = 8 * 128 * 4
    assert budget.bytes == 2 * q.nbytes + 2 * 2 * (1 + 3 + 2 + 0) * page


def test_paged_every_block_is_the_kernel_that_visits_every_block():
    args = paged_case()
    q, k_pages, _, lengths, _ = args
    ran = measure(reference("paged_attention_every_block").paged_attention, *args,
                  pages_per_block=2, structure=None)
    assert ran.work == lesson.paged_budget(q, k_pages, lengths, 2, 4).every_block


def test_check_empty_sequences():
    lengths = np.array([3, 0, 5, 0])
    output = np.ones((4, 2, 8), np.float32)
    assert kind_of(lesson.check_empty_sequences, types.SimpleNamespace(output=output),
                   lengths) == ""
    output[[1, 3]] = np.nan
    with pytest.raises(Diagnosed) as failed:
        lesson.check_empty_sequences(types.SimpleNamespace(output=output), lengths)
    assert failed.value.kind == "empty_sequence_nan"
    assert failed.value.facts == [("nan", "sequences 1, 3: length 0")]
    output[0, 0, 0] = np.nan   # NaN elsewhere too: not this mistake's
    assert kind_of(lesson.check_empty_sequences, types.SimpleNamespace(output=output),
                   lengths) == ""


def test_check_paged_rejects():
    q, k_pages, v_pages, page_indices = lesson.paged_inputs(Rng(0), 2, 4, 3, 128, 8, 4,
                                                            "float32")
    lengths = np.array([8, 3], np.int32)
    args = (q, k_pages, v_pages, lengths, page_indices)
    lesson.check_paged_rejects(REFERENCE.paged_attention, "N=4, K=3", "K", *args,
                               pages_per_block=1)

    def says_nothing_useful(*args, pages_per_block):
        raise ValueError("bad")

    def raises_nothing(q, *args, pages_per_block):
        return q

    for function, words in ((says_nothing_useful, "does not name K"),
                            (raises_nothing, "it raised nothing")):
        with pytest.raises(Diagnosed) as failed:
            lesson.check_paged_rejects(function, "N=4, K=3", "K", *args, pages_per_block=1)
        assert failed.value.kind == "argument_check" and words in failed.value.says
