"""Pipelining: moving data by hand, up to paged attention.

Run `pytest exercises/test_pipelining.py` after every edit; add `-k <puzzle>` for
one puzzle and `--hint` when stuck. Replace each `raise NotImplementedError`
with your code; keep the signatures.

The mental model of this chapter
--------------------------------
A TPU core computes only on what sits in its VMEM (tens of MiB, next to the
vector units) and SMEM (a few KiB of scalars). Everything else lives in HBM:
gigabytes, but far away. Every chapter so far let Pallas move the data: a
BlockSpec told its pipeline which block each grid step needs, and the pipeline
copied it into VMEM before the step (and the output block back after it),
fetching the next block while this one was computed.

That pipeline only knows rectangles picked by index maps. Production kernels
often need more: the rows to fetch come from a table of indices, some blocks
must not be fetched at all, a loop inside one grid step streams an array far
bigger than VMEM. Then the kernel moves the data itself, with the TPU's DMA
engine:

    x_hbm  ── pltpu.make_async_copy(x_hbm, x_vmem, sem).start() ──▶  x_vmem
                          (runs on its own, while the core computes)
           ...                         .wait()  ◀── sem counts the bytes landed

* An operand left in HBM: `pl.BlockSpec(memory_space=pl.ANY)`. The kernel gets
  a ref it cannot read with [...]; it can only name parts of it
  (`x_hbm.at[rows]`) as the source or destination of a copy.
* A DMA semaphore (`pltpu.SemaphoreType.DMA` in scratch_shapes): the copy adds
  to it as its bytes land; `.wait()` blocks until the bytes it expects are
  there, and takes them.
* `.start()` returns at once; the destination holds garbage until `.wait()`.
  Reading it earlier, or starting a second copy into it before the first was
  waited, is a race: on a TPU, a wrong answer some of the time.

The point of starting a copy early is to hide it: while chunk i is computed,
chunk i + 1 is already on its way (puzzle 3):

    DMA engine:  copy 0 │ copy 1   │ copy 2   │ copy 3   │
    core:               │ sum 0    │ sum 1    │ sum 2    │ sum 3

Two promises keep this correct, and the tests hold you to both. Before your
kernel runs, the kit pairs every .start() with a .wait() on the same
semaphore: a wait that nothing will ever satisfy (the kernel would hang), a
copy still in flight when the kernel ends, and a copy into a buffer that
another copy is still filling are named with their lines. While it runs,
interpret mode reports any read of a buffer whose copy has not landed.

Dimension letters: S rows of a long array and D its features, `chunk` rows per
copy; V rows of a table, T the indices looked up; and for attention B batch,
N query heads, K K/V heads, H head dim, P pages in the pool, L tokens per page.

The public function of this chapter is `paged_attention(q, k_pages, v_pages,
lengths, page_indices, *, pages_per_block)` (puzzle 7): decoding attention
over a paged KV cache, the kernel behind every LLM server.
"""
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


# 1. pipelining.one_copy — one manual copy -----------------------------------

def add_one_kernel(x_hbm, o_ref, x_vmem, sem):
    """Copy x from HBM into x_vmem yourself, then store x + 1 into o_ref.

    x_hbm [M, D]: in HBM, so x_hbm[...] is not allowed; x_vmem [M, D]: a VMEM
    scratch; sem: a DMA semaphore; o_ref [M, D]: the output block, in VMEM.

    New here:

        copy = pltpu.make_async_copy(src_ref, dst_ref, sem)
            # describes a copy; nothing moves yet. Refs, not values: a whole
            # ref, or a part of one, x_hbm.at[...]
        copy.start()   # the DMA engine starts copying and the kernel goes on
        copy.wait()    # blocks until the copy landed (its bytes reached sem)

    A copy's destination can be read only after its wait.
    """
    raise NotImplementedError


def add_one(x):
    """x + 1 for x [M, D], with add_one_kernel moving x into VMEM itself.

    basics.add_one again, except that x is not handed to the kernel in VMEM.
    New here, for the call:

        pl.BlockSpec(memory_space=pl.ANY)
            # no block shape, no index map: the kernel gets the operand's ref
            # where it is, in HBM (ANY: wherever the caller's array lives), and
            # Pallas copies nothing for it
        pltpu.VMEM(shape, dtype)          # a VMEM buffer of the kernel's own
        pltpu.SemaphoreType.DMA(shape)    # DMA semaphores; shape () is a single one

    The kernel's own buffers go in scratch_shapes=[...], and the kernel gets
    them after its outputs, in that order. Which operand stays in HBM and what
    the kernel needs for its copy is for you to work out from add_one_kernel.
    The output keeps its default BlockSpec: the whole array, in VMEM, written
    back to HBM by Pallas after the kernel.
    """
    raise NotImplementedError


# 2. pipelining.copy_loop — a loop of copies ---------------------------------

def column_sum_kernel(x_hbm, o_ref, chunk_vmem, sem, *, chunk):
    """o_ref (1, D) = the sum of x's S rows, copying x one chunk of rows at a time.

    x_hbm [S, D] in HBM; chunk_vmem (chunk, D): room for one chunk only;
    sem: one DMA semaphore.

    Why chunks: x may be far bigger than VMEM. One (chunk, D) buffer is reused
    for every chunk, so the kernel runs in fixed VMEM whatever S is:

        x_hbm   ┌───────── chunk 0 ─┬─ chunk 1 ─┬─ chunk 2 ─┬─ ... ┐
                └───────────────────┴───────────┴───────────┴───────┘
                     │ copy, wait, sum; then the next chunk into the same buffer
                     ▼
        chunk_vmem  (chunk, D)  ──▶  running total (1, D), float32

    New here: the rows of chunk i, as a part of the HBM ref, are
    x_hbm.at[pl.ds(start, size)] (pl.ds: `size` rows from row `start`; start
    may be a traced value, size must be a Python int). And a loop inside the
    kernel, lax.fori_loop(lower, upper, body, carry): body(i, carry) returns
    the next carry, which can hold the running total (keep it in float32).
    Each chunk: start its copy, wait, add its column sums.
    """
    raise NotImplementedError


def column_sum(x, *, chunk):
    """x.sum(axis=0, keepdims=True) for x [S, D]: [1, D] in x's dtype; chunk divides S.

    As add_one: x left in HBM, one VMEM scratch and one DMA semaphore, but the
    scratch holds a single chunk. Bind chunk into the kernel with
    functools.partial. The output is the whole (1, D) array, in VMEM.
    """
    raise NotImplementedError


# 3. pipelining.double_buffer — the next copy overlaps this chunk's work -------

def double_buffered_kernel(x_hbm, o_ref, chunks_vmem, sems, *, chunk):
    """column_sum_kernel's sum, with chunk i + 1 landing while chunk i is summed.

    chunks_vmem (2, chunk, D): two slots; sems: two DMA semaphores, one per slot
    (sems.at[s] names semaphore s).

    In puzzle 2 the core sat idle during every copy. With two slots, the copy
    of the next chunk runs while this chunk is summed. Chunk i lives in slot
    i % 2:

        before the loop:  start chunk 0 → slot 0
        step i:           start chunk i + 1 → the other slot   (if there is one)
                          wait for chunk i (its slot, its semaphore)
                          sum the slot of chunk i

        slot 0:  [chunk 0 landing][sum 0]       [chunk 2 landing][sum 2]
        slot 1:         [chunk 1 landing ][sum 1]       [chunk 3 landing][sum 3]

    The order within a step is the lesson. The next copy is started before the
    wait, so that it runs while you wait and sum. And it goes into the slot
    whose chunk was summed in the previous step, never into the slot of chunk
    i, which may still be landing. A copy starts only when there is a chunk to
    fetch: pl.when(...) around it. Every copy started is waited, once.

    The sum itself is puzzle 2's, unchanged: only the copy schedule is new.
    """
    raise NotImplementedError


def column_sum_double_buffered(x, *, chunk):
    """column_sum(x, chunk=chunk), double-buffered: chunk divides S.

    column_sum's call with two of everything: a (2, chunk, D) VMEM scratch and
    pltpu.SemaphoreType.DMA((2,)), an array of two semaphores.
    """
    raise NotImplementedError


# 4. pipelining.write_back — the output in HBM, written by DMA ----------------

def relu_kernel(x_hbm, o_hbm, in_vmem, out_vmem, read_sem, write_sem, *, chunk):
    """o = max(x, 0) for x [S, D], chunk by chunk, each result copied to HBM by you.

    x_hbm, o_hbm [S, D]: both in HBM. in_vmem, out_vmem (chunk, D): one chunk
    in, one chunk out. read_sem, write_sem: a DMA semaphore for the reads and
    one for the writes (a wait on a semaphore shared by both could return when
    the other kind of copy landed).

    A copy goes either way: pltpu.make_async_copy(out_vmem, o_hbm.at[rows], sem)
    writes VMEM to HBM. Per chunk: read it into in_vmem (start, wait), compute
    into out_vmem, start the write-back of out_vmem, and move on: that write
    lands while the next chunk is read.

    Two rules of a write-back:
    - its source is read while the copy runs: before you store the next chunk
      into out_vmem, wait for the write-back of the previous one;
    - no copy may be in flight when the kernel ends: after the loop, wait for
      the last write-back. (Interpret mode would simply drop it.)

    New here: @pl.loop(lower, upper) over a function of i is a fori_loop
    without a carry, for loops that only move data.
    """
    raise NotImplementedError


def relu(x, *, chunk):
    """max(x, 0) for x [S, D], read and written by relu_kernel's own DMAs; chunk divides S.

    The output stays in HBM too: out_specs=pl.BlockSpec(memory_space=pl.ANY).
    Then Pallas copies nothing back: what the kernel's DMAs write is the result.
    """
    raise NotImplementedError


# 5. pipelining.gather — rows picked by indices in SMEM ------------------------

def gather_kernel(ids_ref, table_hbm, o_ref, rows_vmem, sem, *, rows_per_step):
    """Copy the table rows named by ids into this grid step's output block.

    ids_ref [T] int32: every index, in SMEM; table_hbm [V, D] in HBM;
    o_ref (rows_per_step, D): this step's output block; rows_vmem
    (rows_per_step, D): a VMEM scratch for the rows to land in; sem: one DMA
    semaphore.

    Grid step i gathers ids[i * rows_per_step + r] for r < rows_per_step:

        ids   │ 5  2  7  2 │ 0  9  3  1 │          (rows_per_step = 4)
                 step 0       step 1

        step 0:  row 0 ◀── table row 5
                 row 1 ◀── table row 2
                 row 2 ◀── table row 7
                 row 3 ◀── table row 2      (a row may come twice)

    A part of a ref, as the source or the destination of a copy, is named with
    .at[...] and pl.ds(start, size), as in puzzle 2; here each part is a single
    row. An index read from SMEM, ids_ref[k], is a scalar the DMA can use as an
    address (a value in VMEM could not be). Once every row landed, the block is
    the output.

    The copies of a step's rows do not depend on each other. In what order
    should their starts and waits come, so that they do not land one after
    another? (They may share one semaphore: each wait takes one row's bytes. A
    Python for loop over r is fine here: rows_per_step is a small Python int.)
    """
    raise NotImplementedError


def gather_rows(table, ids, *, rows_per_step=8):
    """table[ids] for table [V, D] and ids int32 [T] (each in [0, V)): [T, D].

    rows_per_step divides T. The table stays in HBM; only the rows asked for
    are copied, never the whole table.

    New here, scalar prefetch: grid_spec=pltpu.PrefetchScalarGridSpec(
    num_scalar_prefetch=1, grid=..., in_specs=..., out_specs=...,
    scratch_shapes=...) puts the first call argument (ids) in SMEM before the
    kernel starts. The kernel gets it as its first ref, and every index map
    gets it too, after the grid indices (so an index map of a one-axis grid
    takes two arguments). The output keeps an ordinary BlockSpec, one
    (rows_per_step, D) block per grid step.
    """
    raise NotImplementedError


# 6. pipelining.emit_pipeline — the double-buffered loop, written for you ------

def pipelined_sum_kernel(x_hbm, o_ref, total_vmem, *, chunk):
    """column_sum's sum again, with pltpu.emit_pipeline doing puzzle 3's copies.

    x_hbm [S, D] in HBM; total_vmem (1, D) float32: a VMEM scratch for the
    running total; o_ref (1, D).

    Puzzle 3's schedule is the same for every streaming loop, so Pallas can
    write it for you, inside a kernel:

        pipeline = pltpu.emit_pipeline(
            body,                      # body(x_vmem): one block, already in VMEM
            grid=(steps,),             # an inner grid, run in this kernel
            in_specs=[pl.BlockSpec(block_shape, index_map)],  # as in pallas_call
        )
        pipeline(x_hbm)                # the HBM refs the BlockSpecs cut up

    emit_pipeline allocates the two slots and semaphores, starts the next
    block before waiting for this one, and waits for everything before it
    returns: exactly your puzzle 3, in one call. The body returns nothing:
    where does the running total live from one block to the next, and when
    must it be cleared and stored?
    """
    raise NotImplementedError


def column_sum_pipelined(x, *, chunk):
    """column_sum(x, chunk=chunk) through pltpu.emit_pipeline; chunk divides S.

    x left in HBM, a (1, D) float32 VMEM scratch for the total, no semaphore of
    your own: the pipeline brings its own.
    """
    raise NotImplementedError


# 7. pipelining.paged_attention — decoding over a paged KV cache ----------------

def paged_attention_kernel(lengths_ref, page_indices_ref, q_ref, k_hbm, v_hbm, o_ref,
                           k_vmem, v_vmem, sems, *, pages_per_block, pages_per_sequence):
    """Attention of one sequence's query heads of one K/V head over its paged K/V.

    Grid step (b, h): sequence b, K/V head h.
    lengths_ref [B], page_indices_ref [B * pages_per_sequence]: int32, in SMEM
        (the page table flattened: sequence b's pages start at
        b * pages_per_sequence);
    q_ref (G, H): the G = N // K query heads that share K/V head h;
    k_hbm, v_hbm [K, P, L, H]: the page pool, in HBM;
    o_ref (G, H);
    k_vmem, v_vmem (2, pages_per_block, L, H): two slots of one block of pages;
    sems: two DMA semaphores, one per slot.

    The plan is flash attention (online softmax over blocks of keys) with
    puzzle 3's double buffering and puzzle 5's gather. A block is
    pages_per_block pages, pages_per_block * L tokens:

        tokens of sequence b:  0 .. L-1      L .. 2L-1     2L .. 3L-1    3L .. 4L-1
        live in pool page:     pages[b, 0]   pages[b, 1]   pages[b, 2]   pages[b, 3]
        pages_per_block = 2:   └─────── block 0 ───────┘   └─────── block 1 ───────┘

        (pages = page_indices_ref, flattened: pages[b, j] is entry
        b * pages_per_sequence + j)

        before the loop:   start block 0's pages → slot 0
        block j:           start block j + 1's pages → the other slot
                           wait for block j's pages
                           scores s = q @ k.T (G, tokens), mask, online softmax
        after the loop:    o = acc / l  (zeros when the sequence is empty)

    Decoding work grows with the length, so fetch and compute only what it
    needs:
    - loop over the blocks that hold a token, pl.cdiv(length, tokens per
      block) of them (a fori_loop bound may be a traced value);
    - in a block, start (and wait for) only the pages that hold a token: a
      page whose first token is at or past the length is never fetched (so
      "start block j + 1" starts nothing after the last block, and nothing at
      all for an empty sequence). Read its entry of the page table inside that
      same condition too: past a sequence's last page the entry may not exist;
    - mask the scores of tokens at or past the length to -inf. The slots of
      pages not fetched hold an older block's pages, or NaN: p is 0 there, but
      0 * NaN is NaN, so zero those rows of v too (jnp.where).

    K and V of a page are two copies; one semaphore per slot can count both,
    as long as every copy of the block is waited before the slot is read.
    Scores and sums in float32, inputs upcast (.astype(jnp.float32)); no scale
    on q. The tokens of a slot, as one (tokens, H) matrix:
    k_vmem[slot].reshape(tokens, H).
    """
    raise NotImplementedError


def paged_attention(q, k_pages, v_pages, lengths, page_indices, *, pages_per_block):
    """Decoding attention over a paged KV cache: q [B, N, H] -> [B, N, H] in q's dtype.

    k_pages, v_pages [K, P, L, H]: a pool of P pages of L tokens per K/V head;
    lengths int32 [B]: tokens of each sequence (0 allowed);
    page_indices int32 [B, pages_per_sequence]: sequence b's token t lives in
        pool page page_indices[b, t // L], row t % L.

    Why pages: an LLM server decodes many sequences at once, each growing by
    one token per step. Giving each a contiguous [S_max, H] cache wastes the
    memory of every sequence shorter than S_max; a pool of fixed-size pages,
    handed out as sequences grow, wastes at most one page per sequence. The
    price: the kernel must gather each sequence's pages through its page
    table, and no BlockSpec can express that.

        k_pages[h]:  │ p0 │ p1 │ p2 │ p3 │ p4 │ p5 │ p6 │ p7 │ ...   (the pool)
        sequence 0:  page_indices[0] = [5, 1, 6, ...]  length 19, L = 8
                     tokens 0-7 in p5, 8-15 in p1, 16-18 in p6 (rows 0-2)

    Grouped-query attention: query head n reads K/V head n // G, G = N // K.
    Reshape q to [B, K, G, H] (a reshape, no transpose: heads h * G ...
    h * G + G - 1 share K/V head h), and give the kernel a (G, H) block per
    grid step (b, h) with block shape (None, None, G, H).

    The call: grid (B, K); pltpu.PrefetchScalarGridSpec with 2 scalar-prefetch
    operands, lengths and the page table flattened to 1-D (2-D arrays in SMEM
    waste space); q and the output in (None, None, G, H) blocks, the pages
    left in HBM; scratch: the two page buffers and pltpu.SemaphoreType.DMA((2,)).
    Each grid step waits for all its copies, so both axes are "parallel".

    Check up front, with a ValueError that names the argument: N a multiple of
    K, and pages_per_sequence a multiple of pages_per_block.
    """
    raise NotImplementedError
