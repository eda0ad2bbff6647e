"""The pipelining chapter's lesson machinery: what exercises/test_pipelining.py knows
about kernels that move their own data, beyond the right answer.

* what the learner's DMAs did, read from the measured run: the bytes and copies of
  their own DMAs, the most in flight at once, how often each row of an input was
  copied; and the checks that word a learner's sentence from them (copies by hand,
  one per chunk, every row once, copies overlapped);
* column sums with the known wrong answers of a chunk loop;
* paged attention: the inputs (a page pool, a page table that scatters the pages),
  float64 decode attention with the switches that make known wrong answers of it
  (tokens seen, the K/V head read), and its models of a running state restarted at
  every block or started at 0.
"""
import dataclasses

import jax

from ..checking import fail, raised
from ..frozen import np
from .common import cdiv


# --- what the learner's DMAs did ---------------------------------------------

def dma_traffic(ran, direction):
    """(bytes, copies) your kernels' own DMAs moved: "read" HBM -> VMEM, "written"
    VMEM -> HBM (a BlockSpec's traffic is not in it)."""
    mine = [o for o in ran.traffic.operands if o.name.startswith("DMA ")
            and o.direction == direction]
    return sum(o.bytes for o in mine), sum(o.copies for o in mine)


def in_flight(ran):
    """The most copies your kernels had in flight at once."""
    return max(counts.most_in_flight for counts in ran.counts)


def check_own_copies(ran, *, read=None, written=None, copies=None, what="x",
                     how="through pltpu.make_async_copy"):
    """The bytes the lesson moves by hand went through your own DMAs: `read` bytes
    HBM -> VMEM (in `copies` copies, where given), `written` bytes VMEM -> HBM."""
    for direction, expected in (("read", read), ("written", written)):
        if expected is None:
            continue
        moved, count = dma_traffic(ran, direction)
        if moved != expected:
            where = "HBM -> VMEM" if direction == "read" else "VMEM -> HBM"
            fail("not_by_hand", (
                f"your own DMAs moved {moved} B {where}, the puzzle's copies move "
                f"{expected} B: {what} must stay in HBM (pl.BlockSpec(memory_space=pl.ANY)) "
                f"and travel {how}: not through a BlockSpec that copies it for you, and "
                "not by indexing the HBM ref itself, which a TPU kernel cannot load from."),
                [("dma", f"{direction}: yours {moved} B in {count} copies · expected "
                         f"{expected} B")])
        if direction == "read" and copies is not None and count < copies:
            fail("copies", (
                f"your kernel read {what} in {count} DMA{'s' * (count != 1)}; the puzzle "
                f"copies one chunk at a time, {copies} copies: a copy of the whole array "
                "needs VMEM for all of it, which a long array does not have."),
                [("dma", f"yours {count} copies · one per chunk: {copies}")])
        if direction == "read" and copies is not None and count > copies:
            fail("copies_many", (
                f"your kernel read {what} in {count} DMAs, more than its {copies} chunks: "
                "each copy moves one whole chunk of rows, and there is one per chunk "
                "(smaller pieces pay a DMA's fixed cost more often)."),
                [("dma", f"yours {count} copies · one per chunk: {copies}")])


def check_rows_copied_once(ran, x, *, chunk):
    """Your copies read every row of x exactly once (where they read x at all): the
    chunks tile x, none dropped, none read twice."""
    copied = ran.copies_of(x).min(axis=tuple(range(1, x.ndim)))
    if not copied.any() or (copied == 1).all():
        return
    never, twice = np.flatnonzero(copied == 0), np.flatnonzero(copied > 1)
    facts = [(label, spans(rows)) for label, rows in (("never read", never),
                                                     ("read twice", twice)) if len(rows)]
    fail("coverage", (
        f"your copies do not read each row of x once: chunk i is rows i * chunk to "
        f"(i + 1) * chunk - 1, x_hbm.at[pl.ds(i * chunk, chunk)] (pl.ds takes the first "
        "row and the number of rows), and the loop visits every chunk once, from 0 to "
        f"S // chunk - 1 (S={x.shape[0]}, chunk={chunk})."), facts)


def spans(rows) -> str:
    """'rows 0-15, 48-63' for the sorted row numbers given."""
    parts, start = [], rows[0]
    for a, b in zip(rows, list(rows[1:]) + [None]):
        if b is None or b != a + 1:
            parts.append(f"{start}-{a}" if a != start else f"{start}")
            start = b
    return "rows " + ", ".join(parts)


def check_in_flight(ran, *, at_least, why):
    """At some moment at least `at_least` copies were in flight together."""
    most = in_flight(ran)
    if most < at_least:
        fail("copies_not_overlapped", (
            f"your copies overlap too little: at most {most} in flight at once, where the "
            f"puzzle's schedule has {at_least}. {why}"),
            [("in flight", f"yours at most {most} · the puzzle's schedule {at_least}")])


# --- per puzzle: known wrong answers ------------------------------------------

def column_sum_mistakes(x, chunk):
    """The wrong answers a chunk loop is known to give for the column sum of x [S, D],
    for check(..., likely=)."""
    chunks = x.astype(np.float64).reshape(-1, chunk, x.shape[1]).sum(axis=1)
    return {"first_chunk_only": (chunks[:1] * len(chunks)).astype(x.dtype),  # one chunk, n times
            "last_chunk_only": chunks[-1:].astype(x.dtype)}  # each chunk replaced the total


def write_back_mistakes(x, chunk):
    """Known wrong relu(x) outputs of a chunked write-back, for check(..., likely=)."""
    S, D = x.shape
    steps = np.arange(S) // chunk

    def shifted():   # chunk i's rows hold chunk i + 1's result (written after it)
        later = np.minimum(steps + 1, S // chunk - 1)
        return np.maximum(x.reshape(-1, chunk, D)[later[::chunk]].reshape(S, D), 0)

    return {"relu_missing": x, "shifted": shifted}


def gather_mistakes(table, ids, rows_per_step):
    """Known wrong gather_rows(table, ids) outputs, for check(..., likely=)."""
    first_step = np.resize(ids[:rows_per_step], len(ids))
    return {"first_step_ids": table[first_step], "rows_in_order": table[:len(ids)]}


def paged_inputs(rng, B, N, K, H, L, pages_per_sequence, dtype, far_below=None):
    """q, a pool of K/V pages twice the size the sequences need, and a page table that
    scatters each sequence's pages over the pool. ``far_below``: a sequence whose every
    score lies far below zero (near -300: exp of a score underflows, so a running max
    that starts at 0 instead of -inf loses the whole sequence)."""
    P = 2 * B * pages_per_sequence
    q = rng.normal((B, N, H), dtype)
    k_pages, v_pages = rng.normal((K, P, L, H), dtype), rng.normal((K, P, L, H), dtype)
    if far_below is not None:
        k_pages = (k_pages + 2).astype(dtype)
        q[far_below] = (-np.abs(q[far_below]) - 0.5).astype(dtype)
    page_indices = rng.permutation(P)[:B * pages_per_sequence].astype(np.int32)
    return q, k_pages, v_pages, page_indices.reshape(B, pages_per_sequence)


def decode_attention(q, k_pages, v_pages, lengths, page_indices, *, head_of=None,
                     visible=None):
    """Attention of one query per sequence over its first lengths[b] tokens, in float64:
    the pages of sequence b, in page-table order, are its K/V. Query head n reads K/V
    head head_of(n) (default n // (N // K)); visible(b) overrides how many tokens
    sequence b sees."""
    B, N, H = q.shape
    K, _, L, _ = k_pages.shape
    out = np.zeros((B, N, H))
    for b in range(B):
        seen = visible(b) if visible else lengths[b]
        if seen == 0:
            continue
        k = k_pages[:, page_indices[b]].reshape(K, -1, H)[:, :seen].astype(np.float64)
        v = v_pages[:, page_indices[b]].reshape(K, -1, H)[:, :seen].astype(np.float64)
        heads = [head_of(n) if head_of else n // (N // K) for n in range(N)]
        s = np.einsum("nh,nth->nt", q[b].astype(np.float64), k[heads])
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[b] = np.einsum("nt,nth->nh", p / p.sum(axis=1, keepdims=True), v[heads])
    return out


def paged_mistakes(q, k_pages, v_pages, lengths, page_indices, pages_per_block, dtype):
    """Known wrong paged_attention(q, k_pages, v_pages, lengths, page_indices) outputs,
    for check(..., likely=)."""
    B, N, H = q.shape
    K, _, L, _ = k_pages.shape
    pages_per_sequence = page_indices.shape[1]
    args = (q, k_pages, v_pages, lengths, page_indices)
    tokens_per_block = pages_per_block * L

    def seeing(visible=None, **options):
        return lambda: decode_attention(*args, visible=visible, **options).astype(dtype)

    def with_args(**changed):   # the truth of other inputs: a near-miss's answer
        given = dict(zip(("q", "k_pages", "v_pages", "lengths", "page_indices"), args))
        return lambda: decode_attention(**dict(given, **changed)).astype(dtype)

    return {"mask_missing": seeing(lambda b: cdiv(lengths[b], L) * L),
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
            "m_starts_at_zero": lambda: m_starts_at_zero(*args, dtype)}


@dataclasses.dataclass
class PagedBudget:
    """What paged_attention's schedule computes, moves and holds: one block of
    pages_per_block pages at a time per (sequence, K/V head), double-buffered."""
    flops: int          # scores and p @ v of the blocks each sequence's length reaches
    every_block: int    # ... of every block of the page table (nothing skipped)
    bytes: int          # q in, o out, and each K and V page a sequence reaches, once
    vmem: int           # two slots of one block of pages, for K and for V; q and o blocks
    overlapped: int     # dots computed while the next block's pages land
    most_blocks: int    # the most blocks of any sequence


def paged_budget(q, k_pages, lengths, pages_per_block, pages_per_sequence):
    """The budget of paged_attention(q, k_pages, ..., lengths, ...) (PagedBudget)."""
    B, N, H = q.shape
    K, _, L, _ = k_pages.shape
    tokens_per_block = pages_per_block * L
    G, itemsize = N // K, q.itemsize
    blocks = [cdiv(n, tokens_per_block) for n in lengths]
    every = B * (pages_per_sequence // pages_per_block)
    block_flops = 2 * (2 * G * tokens_per_block * H)   # scores and p @ v
    page = L * H * itemsize
    pages = [cdiv(n, L) for n in lengths]
    needed = 2 * q.nbytes + 2 * K * sum(pages) * page          # q in, o out, K and V pages
    two_slots = 2 * 2 * pages_per_block * page          # K and V, two slots each
    return PagedBudget(flops=K * sum(blocks) * block_flops, every_block=K * every * block_flops,
                       bytes=needed, vmem=two_slots + 2 * 2 * G * H * itemsize,
                       overlapped=2 * K * sum(max(n - 1, 0) for n in blocks),
                       most_blocks=max(blocks))


def check_empty_sequences(ran, lengths):
    """A sequence of length 0 gives zeros, never NaN."""
    nan = np.isnan(np.asarray(ran.output, np.float32)).any(axis=(1, 2))
    if nan.any() and (nan == (lengths == 0)).all():
        fail("empty_sequence_nan", (
            "the sequences of length 0 came out NaN: with no token the softmax has nothing "
            "to sum, and acc / l is 0 / 0. A sequence of length 0 gives zeros."),
            [("nan", f"sequences {', '.join(map(str, np.flatnonzero(nan)))}: length 0")])


def last_block_only(q, k_pages, v_pages, lengths, page_indices, tokens_per_block, dtype):
    """Each sequence attends over the tokens of its last block only (the running state
    restarted at every block)."""
    K, _, _, H = k_pages.shape
    out = np.zeros(q.shape)
    for b, n in enumerate(lengths):
        if n:
            start = (n - 1) // tokens_per_block * tokens_per_block
            k = k_pages[:, page_indices[b]].reshape(K, -1, H)[:, start:n]
            v = v_pages[:, page_indices[b]].reshape(K, -1, H)[:, start:n]
            out[b] = attend(q[b], k, v)
    return out.astype(dtype)


def m_starts_at_zero(q, k_pages, v_pages, lengths, page_indices, dtype):
    """The running max started at 0, not -inf: a sequence whose every score is far below
    zero has exp(s - 0) = 0 everywhere, so l = 0 and acc / l gives zeros (or NaN)."""
    out = decode_attention(q, k_pages, v_pages, lengths, page_indices)
    B, N, H = q.shape
    K = k_pages.shape[0]
    for b in range(B):
        k = k_pages[:, page_indices[b]].reshape(K, -1, H)[:, :lengths[b]]
        scores = np.einsum("nh,nth->nt", q[b].astype(np.float64),
                           k[[n // (N // K) for n in range(N)]].astype(np.float64))
        if lengths[b] and scores.max() < -150:
            out[b] = 0.0
    return out.astype(dtype)


def attend(q, k, v):
    """q [N, H] over k, v [K, T, H] in float64; query head n reads K/V head n // (N // K)."""
    N, K = q.shape[0], k.shape[0]
    heads = [n // (N // K) for n in range(N)]
    s = np.einsum("nh,nth->nt", q.astype(np.float64), k[heads].astype(np.float64))
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return np.einsum("nt,nth->nh", p / p.sum(axis=1, keepdims=True),
                     v[heads].astype(np.float64))


# --- the chapter's own checks ----------------------------------------------------

def check_paged_rejects(paged_attention, bad, name, *args, pages_per_block):
    """paged_attention(*args, pages_per_block=) raises a ValueError that names `name`
    before any kernel is built (bad: the bad argument, in words)."""
    try:
        jax.eval_shape(lambda *a: paged_attention(
            *a, pages_per_block=pages_per_block), *args)
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
              ("raised", raised(error))])
    fail("argument_check", f"paged_attention({bad}) should raise a ValueError that names the "
         "argument; it raised nothing.", [("called", f"paged_attention({bad})"),
                                          ("raised", "nothing")])
