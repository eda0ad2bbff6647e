"""Pipelining: moving data by hand, up to paged attention — reference solutions.

Same functions and signatures as exercises/pipelining.py. Learners see these
through `pytest --hint=3`, so they are written as code worth copying.
"""
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _check_chunk(name, x, chunk):
    """Arguments of the chunked puzzles: x [S, D], chunk rows that divide S."""
    if x.ndim != 2:
        raise ValueError(f"{name}: x must be [S, D], got shape {x.shape}")
    if chunk < 1 or x.shape[0] % chunk:
        raise ValueError(f"{name}: chunk={chunk} must divide S={x.shape[0]}")


# 1. pipelining.one_copy — one manual copy -----------------------------------

def add_one_kernel(x_hbm, o_ref, x_vmem, sem):
    copy = pltpu.make_async_copy(x_hbm, x_vmem, sem)   # HBM -> VMEM, signals sem
    copy.start()
    copy.wait()                                        # x_vmem holds x from here on
    o_ref[...] = x_vmem[...] + 1


def add_one(x):
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],      # x stays in HBM
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype),      # where the copy lands
                        pltpu.SemaphoreType.DMA(())],      # what the copy signals
    )(x)


# 2. pipelining.copy_loop — a loop of copies ---------------------------------

def column_sum_kernel(x_hbm, o_ref, chunk_vmem, sem, *, chunk):
    num_chunks = x_hbm.shape[0] // chunk

    def add_chunk(i, total):
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(i * chunk, chunk)], chunk_vmem, sem)
        copy.start()
        copy.wait()
        return total + jnp.sum(chunk_vmem[...].astype(jnp.float32), axis=0, keepdims=True)

    total = lax.fori_loop(0, num_chunks, add_chunk, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = total.astype(o_ref.dtype)


def column_sum(x, *, chunk):
    _check_chunk("column_sum", x, chunk)
    S, D = x.shape
    return pl.pallas_call(
        functools.partial(column_sum_kernel, chunk=chunk),
        out_shape=jax.ShapeDtypeStruct((1, D), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((chunk, D), x.dtype), pltpu.SemaphoreType.DMA(())],
    )(x)


# 3. pipelining.double_buffer — the next copy overlaps this chunk's work -------

def double_buffered_kernel(x_hbm, o_ref, chunks_vmem, sems, *, chunk):
    num_chunks = x_hbm.shape[0] // chunk

    def chunk_copy(i, slot):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(i * chunk, chunk)], chunks_vmem.at[slot],
                                     sems.at[slot])

    chunk_copy(0, 0).start()   # the first chunk has nothing to hide behind

    def add_chunk(i, total):
        slot = i % 2

        @pl.when(i + 1 < num_chunks)
        def fetch_next():          # into the other slot, while this one is summed
            chunk_copy(i + 1, 1 - slot).start()

        chunk_copy(i, slot).wait()
        return total + jnp.sum(chunks_vmem[slot].astype(jnp.float32), axis=0, keepdims=True)

    total = lax.fori_loop(0, num_chunks, add_chunk, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = total.astype(o_ref.dtype)


def column_sum_double_buffered(x, *, chunk):
    _check_chunk("column_sum_double_buffered", x, chunk)
    S, D = x.shape
    return pl.pallas_call(
        functools.partial(double_buffered_kernel, chunk=chunk),
        out_shape=jax.ShapeDtypeStruct((1, D), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((2, chunk, D), x.dtype),   # two slots
                        pltpu.SemaphoreType.DMA((2,))],       # one semaphore per slot
    )(x)


# 4. pipelining.write_back — the output in HBM, written by DMA ----------------

def relu_kernel(x_hbm, o_hbm, in_vmem, out_vmem, read_sem, write_sem, *, chunk):
    num_chunks = x_hbm.shape[0] // chunk

    def rows(i):
        return pl.ds(i * chunk, chunk)

    def read(i):
        return pltpu.make_async_copy(x_hbm.at[rows(i)], in_vmem, read_sem)

    def write(i):
        return pltpu.make_async_copy(out_vmem, o_hbm.at[rows(i)], write_sem)

    @pl.loop(0, num_chunks)
    def relu_chunk(i):
        read(i).start()
        read(i).wait()
        y = jnp.maximum(in_vmem[...], 0)   # computed while write(i - 1) is landing

        @pl.when(i > 0)
        def previous_write_done():   # out_vmem is the source of write(i - 1)
            write(i - 1).wait()

        out_vmem[...] = y
        write(i).start()           # lands while the next chunk is read and computed

    write(num_chunks - 1).wait()   # nothing may be in flight when the kernel ends


def relu(x, *, chunk):
    _check_chunk("relu", x, chunk)
    S, D = x.shape
    return pl.pallas_call(
        functools.partial(relu_kernel, chunk=chunk),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),        # the kernel writes HBM itself
        scratch_shapes=[pltpu.VMEM((chunk, D), x.dtype), pltpu.VMEM((chunk, D), x.dtype),
                        pltpu.SemaphoreType.DMA(()),         # signalled by the reads
                        pltpu.SemaphoreType.DMA(())],        # and by the writes
    )(x)


# 5. pipelining.gather — rows picked by indices in SMEM ------------------------

def gather_kernel(ids_ref, table_hbm, o_ref, rows_vmem, sem, *, rows_per_step):
    first = pl.program_id(0) * rows_per_step

    def row_copy(r):   # table row ids[first + r] -> row r of this step's block
        return pltpu.make_async_copy(table_hbm.at[pl.ds(ids_ref[first + r], 1)],
                                     rows_vmem.at[pl.ds(r, 1)], sem)

    for r in range(rows_per_step):   # every copy in flight at once, on one semaphore
        row_copy(r).start()
    for r in range(rows_per_step):
        row_copy(r).wait()
    o_ref[...] = rows_vmem[...]


def gather_rows(table, ids, *, rows_per_step=8):
    if table.ndim != 2:
        raise ValueError(f"gather_rows: table must be [V, D], got shape {table.shape}")
    if ids.ndim != 1 or ids.dtype != jnp.int32:
        raise ValueError(f"gather_rows: ids must be int32 [T], got {ids.dtype} {ids.shape}")
    if rows_per_step < 1 or ids.shape[0] % rows_per_step:
        raise ValueError(f"gather_rows: rows_per_step={rows_per_step} must divide "
                         f"T={ids.shape[0]}")
    (T,), (_, D) = ids.shape, table.shape
    return pl.pallas_call(
        functools.partial(gather_kernel, rows_per_step=rows_per_step),
        out_shape=jax.ShapeDtypeStruct((T, D), table.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,                               # ids, in SMEM
            grid=(T // rows_per_step,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],        # the table stays in HBM
            out_specs=pl.BlockSpec((rows_per_step, D), lambda i, ids: (i, 0)),
            scratch_shapes=[pltpu.VMEM((rows_per_step, D), table.dtype),   # rows land here
                            pltpu.SemaphoreType.DMA(())]),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(ids, table)


# 6. pipelining.emit_pipeline — the double-buffered loop, written for you ------

def pipelined_sum_kernel(x_hbm, o_ref, total_vmem, *, chunk):
    total_vmem[...] = jnp.zeros_like(total_vmem)

    def add_chunk(x_vmem):   # one (chunk, D) block, already in VMEM
        total_vmem[...] += jnp.sum(x_vmem[...].astype(jnp.float32), axis=0, keepdims=True)

    pltpu.emit_pipeline(
        add_chunk,
        grid=(x_hbm.shape[0] // chunk,),
        in_specs=[pl.BlockSpec((chunk, x_hbm.shape[1]), lambda i: (i, 0))],
    )(x_hbm)
    o_ref[...] = total_vmem[...].astype(o_ref.dtype)


def column_sum_pipelined(x, *, chunk):
    _check_chunk("column_sum_pipelined", x, chunk)
    S, D = x.shape
    return pl.pallas_call(
        functools.partial(pipelined_sum_kernel, chunk=chunk),
        out_shape=jax.ShapeDtypeStruct((1, D), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((1, D), jnp.float32)],
    )(x)


# 7. pipelining.paged_attention — decoding over a paged KV cache ----------------

def paged_attention_kernel(lengths_ref, page_indices_ref, q_ref, k_hbm, v_hbm, o_ref,
                           k_vmem, v_vmem, sems, *, pages_per_block, pages_per_sequence):
    b, h = pl.program_id(0), pl.program_id(1)
    page_size = k_vmem.shape[2]
    tokens_per_block = pages_per_block * page_size
    length = lengths_ref[b]
    num_blocks = pl.cdiv(length, tokens_per_block)   # blocks that hold a token

    def each_page(block, slot, action):
        """action(copy) for the K and V copies of every page of `block` that holds a
        token of this sequence: the pages past its length are never fetched (so a block
        past the last one starts nothing)."""
        for p in range(pages_per_block):
            @pl.when(block * tokens_per_block + p * page_size < length)
            def page_holds_a_token():
                page = page_indices_ref[b * pages_per_sequence + block * pages_per_block + p]
                for pages_hbm, pages_vmem in ((k_hbm, k_vmem), (v_hbm, v_vmem)):
                    action(pltpu.make_async_copy(pages_hbm.at[h, page],
                                                 pages_vmem.at[slot, p], sems.at[slot]))

    each_page(0, 0, lambda copy: copy.start())   # block 0, if the sequence has tokens

    q = q_ref[...].astype(jnp.float32)                       # (G, H): this K/V head's group

    def attend_block(block, carry):
        m, l, acc = carry
        slot = block % 2

        each_page(block + 1, 1 - slot, lambda copy: copy.start())   # lands during this one
        each_page(block, slot, lambda copy: copy.wait())
        k = k_vmem[slot].reshape(tokens_per_block, -1).astype(jnp.float32)
        v = v_vmem[slot].reshape(tokens_per_block, -1).astype(jnp.float32)
        token = block * tokens_per_block + lax.broadcasted_iota(
            jnp.int32, (1, tokens_per_block), 1)
        visible = token < length                             # (1, tokens_per_block)
        s = lax.dot_general(q, k, (((1,), (1,)), ((), ())),
                            precision=lax.Precision.HIGHEST,
                            preferred_element_type=jnp.float32)   # (G, tokens_per_block)
        s = jnp.where(visible, s, -jnp.inf)
        m_new = jnp.maximum(m, s.max(axis=1, keepdims=True))
        alpha, p = jnp.exp(m - m_new), jnp.exp(s - m_new)
        # Pages past the length were not fetched: their rows hold an older block's
        # pages, or NaN. p is 0 there, but 0 * NaN is NaN: zero those rows of v.
        v = jnp.where(visible.reshape(tokens_per_block, 1), v, 0.0)
        pv = jnp.dot(p, v, precision=lax.Precision.HIGHEST,
                     preferred_element_type=jnp.float32)
        return m_new, alpha * l + p.sum(axis=1, keepdims=True), alpha * acc + pv

    G, H = q.shape
    start = (jnp.full((G, 1), -jnp.inf, jnp.float32), jnp.zeros((G, 1), jnp.float32),
             jnp.zeros((G, H), jnp.float32))
    _, l, acc = lax.fori_loop(0, num_blocks, attend_block, start)
    o_ref[...] = jnp.where(l > 0, acc / l, 0.0).astype(o_ref.dtype)   # length 0: zeros


def paged_attention(q, k_pages, v_pages, lengths, page_indices, *, pages_per_block):
    if q.ndim != 3:
        raise ValueError(f"paged_attention: q must be [B, N, H], got shape {q.shape}")
    if k_pages.ndim != 4 or k_pages.shape != v_pages.shape:
        raise ValueError(f"paged_attention: k_pages and v_pages must both be [K, P, L, H], "
                         f"got {k_pages.shape} and {v_pages.shape}")
    B, N, H = q.shape
    K, P, L, H_kv = k_pages.shape
    if H_kv != H:
        raise ValueError(f"paged_attention: q has H={H} but the pages have H={H_kv}")
    if N % K:
        raise ValueError(f"paged_attention: N={N} query heads must be a multiple of the "
                         f"K={K} K/V heads")
    if q.dtype != k_pages.dtype or k_pages.dtype != v_pages.dtype:
        raise ValueError(f"paged_attention: q, k_pages and v_pages must share one dtype, got "
                         f"{q.dtype}, {k_pages.dtype}, {v_pages.dtype}")
    if lengths.shape != (B,) or lengths.dtype != jnp.int32:
        raise ValueError(f"paged_attention: lengths must be int32 [B={B}], got "
                         f"{lengths.dtype} {lengths.shape}")
    if page_indices.ndim != 2 or page_indices.shape[0] != B or page_indices.dtype != jnp.int32:
        raise ValueError(f"paged_attention: page_indices must be int32 [B={B}, "
                         f"pages_per_sequence], got {page_indices.dtype} {page_indices.shape}")
    pages_per_sequence = page_indices.shape[1]
    if pages_per_block < 1 or pages_per_sequence % pages_per_block:
        raise ValueError(f"paged_attention: pages_per_sequence={pages_per_sequence} must be a "
                         f"multiple of pages_per_block={pages_per_block}")
    G = N // K
    group = pl.BlockSpec((None, None, G, H), lambda b, h, lengths, pages: (b, h, 0, 0))
    pages_buffer = pltpu.VMEM((2, pages_per_block, L, H), k_pages.dtype)   # two slots
    out = pl.pallas_call(
        functools.partial(paged_attention_kernel, pages_per_block=pages_per_block,
                          pages_per_sequence=pages_per_sequence),
        out_shape=jax.ShapeDtypeStruct((B, K, G, H), q.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,                    # lengths and the page table, in SMEM
            grid=(B, K),
            in_specs=[group, pl.BlockSpec(memory_space=pl.ANY),
                      pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=group,
            scratch_shapes=[pages_buffer, pages_buffer, pltpu.SemaphoreType.DMA((2,))]),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(lengths, page_indices.reshape(-1), q.reshape(B, K, G, H), k_pages, v_pages)
    return out.reshape(B, N, H)
