"""Splash attention — reference solutions.

Same functions and signatures as exercises/splash.py. Learners see these
through `pytest --hint=3`, so they are written as code worth copying.

`splash_attention` at the end is the chapter's public API: block-sparse
attention for a concrete boolean mask [T, S] (shared by every head) or [N, T, S]
(one per query head), grouped-query heads (K divides N), any T and S, float32 or
bfloat16 in and out. Everything the kernel needs to know about the mask (block
categories, the compacted visiting order, the de-duplicated mask blocks) is
computed from it in NumPy before tracing, as JAX's own splash attention does.
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# The score given to a key a query must not see. exp(MASK_VALUE - m) is 0 like
# exp(-inf), but a row whose keys are all masked stays finite (-inf - -inf is NaN).
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)

# Block categories.
EMPTY, PARTIAL, FULL = 0, 1, 2


def online_softmax_step(m, l, acc, s, v, visible=None):
    """flash.online's step, with a mask: fold a chunk of scores s [R, C] and values
    v [C, H] into the running max m [R, 1], sum l [R, 1] and accumulator acc [R, H].

    visible [R, C] (bool, optional): which scores count. A hidden score adds nothing,
    not even to a row that has no visible key in this chunk."""
    if visible is not None:
        s = jnp.where(visible, s, MASK_VALUE)
    m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
    alpha = jnp.exp(m - m_new)          # converts sums taken against m to m_new
    p = jnp.exp(s - m_new)
    if visible is not None:
        p = jnp.where(visible, p, 0.0)
    l_new = alpha * l + jnp.sum(p, axis=-1, keepdims=True)
    acc_new = alpha * acc + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return m_new, l_new, acc_new


# 1. splash.categories — empty, partial or full: the mask seen block by block ---

def block_categories(mask, block_q, block_kv):
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim < 2:
        raise ValueError(f"block_categories: mask must be [..., T, S]; got shape {mask.shape}")
    *heads, T, S = mask.shape
    if T % block_q or S % block_kv:
        raise ValueError(f"block_categories: T={T} must be a multiple of block_q={block_q} "
                         f"and S={S} of block_kv={block_kv}")
    blocks = mask.reshape(*heads, T // block_q, block_q, S // block_kv, block_kv)
    some = blocks.any(axis=(-3, -1))     # at least one visible key: not empty
    every = blocks.all(axis=(-3, -1))    # every key visible: full
    return some.astype(np.int8) + every.astype(np.int8)


# 2. splash.skip_empty — flash attention that skips empty blocks --------------

def block_mask_kernel(categories_ref, q_ref, k_ref, v_ref, mask_ref, o_ref, m_scratch,
                      l_scratch, acc_scratch, *, sm_scale):
    i, kv = pl.program_id(2), pl.program_id(3)
    category = categories_ref[i, kv]

    @pl.when(kv == 0)
    def start_q_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)
        acc_scratch[...] = jnp.zeros_like(acc_scratch)

    def fold(visible):
        s = jnp.einsum("qh,kh->qk", q_ref[...], k_ref[...],
                       preferred_element_type=jnp.float32) * sm_scale
        m, l, acc = online_softmax_step(m_scratch[...], l_scratch[...], acc_scratch[...],
                                        s, v_ref[...], visible)
        m_scratch[...] = m
        l_scratch[...] = l
        acc_scratch[...] = acc

    @pl.when(category == FULL)
    def fold_full_block():          # every key visible: no mask to apply
        fold(None)

    @pl.when(category == PARTIAL)
    def fold_partial_block():       # some keys visible: the mask decides which
        fold(mask_ref[...])

    @pl.when(kv == pl.num_programs(3) - 1)
    def finish_q_block():
        o_ref[...] = (acc_scratch[...] / l_scratch[...]).astype(o_ref.dtype)


def flash_block_mask(q, k, v, mask, *, sm_scale=None, block_q=128, block_kv=128):
    B, N, T, H = q.shape
    S = k.shape[2]
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != (T, S):
        raise ValueError(f"flash_block_mask: mask must be [T={T}, S={S}]; got {mask.shape}")
    if T % block_q or S % block_kv:
        raise ValueError(f"flash_block_mask: T={T} must be a multiple of block_q={block_q} "
                         f"and S={S} of block_kv={block_kv}")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    # Known before tracing: it goes to SMEM, where the kernel reads one entry per step.
    categories = block_categories(mask, block_q, block_kv).astype(np.int32)

    def q_index_map(b, n, i, kv, categories_ref):
        return (b, n, i, 0)

    def kv_index_map(b, n, i, kv, categories_ref):
        return (b, n, kv, 0)

    def mask_index_map(b, n, i, kv, categories_ref):
        return (i, kv)

    q_spec = pl.BlockSpec((None, None, block_q, H), q_index_map)
    kv_spec = pl.BlockSpec((None, None, block_kv, H), kv_index_map)
    return pl.pallas_call(
        functools.partial(block_mask_kernel, sm_scale=sm_scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(B, N, T // block_q, S // block_kv),
            in_specs=[q_spec, kv_spec, kv_spec,
                      pl.BlockSpec((block_q, block_kv), mask_index_map)],
            out_specs=q_spec,
            scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32),     # m
                            pltpu.VMEM((block_q, 1), jnp.float32),     # l
                            pltpu.VMEM((block_q, H), jnp.float32)]),   # acc
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(categories, q, k, v, mask)


# 3. splash.families — masks as functions of (row, col) ------------------------

def make_mask(T, S, *, causal=False, window=None, prefix=0, segments=None):
    if prefix and not causal:
        raise ValueError(f"make_mask: prefix={prefix} widens a causal mask; pass causal=True")
    row = np.arange(T)[:, None]          # the query of each score, [T, 1]
    col = np.arange(S)[None, :]          # the key of each score, [1, S]
    visible = np.ones((T, S), dtype=bool)
    if causal:   # keys up to the query's own position; the whole prefix for everyone
        visible &= (col <= row) | (col < prefix)
    if window is not None:
        left, right = window
        if left is not None:
            visible &= col >= row - left
        if right is not None:
            visible &= col <= row + right
    if segments is not None:
        q_segments, kv_segments = (np.asarray(ids) for ids in segments)
        if q_segments.shape != (T,) or kv_segments.shape != (S,):
            raise ValueError(f"make_mask: segments must be ids [T={T}] and [S={S}]; got "
                             f"{q_segments.shape} and {kv_segments.shape}")
        visible &= q_segments[:, None] == kv_segments[None, :]
    return visible


# 4. splash.compact — per q block, the list of kv blocks to visit ---------------

def fill_ahead(values, needed):
    """PROVIDED: values [..., R, C] where needed; every other entry takes the value of
    the next needed entry of its table [R, C] in row-major order (the grid's order),
    the last needed entry's after it, and 0 in a table where nothing is needed."""
    values, needed = np.asarray(values), np.asarray(needed, dtype=bool)
    *tables, rows, width = values.shape
    filled = np.zeros_like(values)
    for table in np.ndindex(*tables):
        flat, keep = values[table].reshape(-1), needed[table].reshape(-1)
        at = np.flatnonzero(keep)
        if at.size:
            following = np.minimum(np.searchsorted(at, np.arange(flat.size)), at.size - 1)
            filled[table] = flat[at[following]].reshape(rows, width)
    return filled


def compact(categories):
    categories = np.asarray(categories)
    *tables, num_q, num_kv = categories.shape
    visit = categories != EMPTY
    width = max(1, int(visit.sum(axis=-1).max(initial=0)))   # the longest list
    data_next = np.zeros((*tables, num_q, width), np.int32)
    block_mask = np.zeros((*tables, num_q, width), np.int32)
    for row in np.ndindex(*tables, num_q):
        kv_blocks = np.flatnonzero(visit[row])       # the blocks this q block visits
        data_next[row][:kv_blocks.size] = kv_blocks
        block_mask[row][:kv_blocks.size] = categories[row][kv_blocks]
    # Padding steps (block_mask 0) name the block the next visit needs: no new fetch.
    return fill_ahead(data_next, block_mask != EMPTY), block_mask


# 5. splash.sparse_grid — a grid as long as the longest list, index maps that read it

def splash_kernel(data_next_ref, block_mask_ref, mask_next_ref, q_ref, k_ref, v_ref, mask_ref,
                  o_ref, m_scratch, l_scratch, acc_scratch, *, sm_scale):
    n, i, j = pl.program_id(1), pl.program_id(2), pl.program_id(3)
    category = block_mask_ref[n, i, j]

    @pl.when(j == 0)
    def start_q_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)
        acc_scratch[...] = jnp.zeros_like(acc_scratch)

    def fold(visible):
        s = jnp.einsum("qh,kh->qk", q_ref[...], k_ref[...],
                       preferred_element_type=jnp.float32) * sm_scale
        m, l, acc = online_softmax_step(m_scratch[...], l_scratch[...], acc_scratch[...],
                                        s, v_ref[...], visible)
        m_scratch[...] = m
        l_scratch[...] = l
        acc_scratch[...] = acc

    @pl.when(category == FULL)
    def fold_full_block():
        fold(None)

    @pl.when(category == PARTIAL)
    def fold_partial_block():
        fold(mask_ref[...])

    @pl.when(j == pl.num_programs(3) - 1)
    def finish_q_block():
        l = l_scratch[...]
        # A row that sees no key has l == 0 (and acc == 0): it outputs 0, not 0 / 0.
        o_ref[...] = (acc_scratch[...] / jnp.where(l == 0, 1, l)).astype(o_ref.dtype)


def splash_call(q, k, v, data_next, block_mask, mask_next, mask_blocks, *, sm_scale=None):
    B, N, T, H = q.shape
    K, S = k.shape[1], k.shape[2]
    _, block_q, block_kv = mask_blocks.shape
    if N % K or T % block_q or S % block_kv:
        raise ValueError(f"splash_call: N={N} must be a multiple of K={K}, T={T} of "
                         f"block_q={block_q} and S={S} of block_kv={block_kv}")
    if data_next.shape[:2] != (N, T // block_q):
        raise ValueError(f"splash_call: the tables must be [N={N}, T/block_q="
                         f"{T // block_q}, width]; got {data_next.shape}")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    group = N // K   # query heads per K/V head

    def q_index_map(b, n, i, j, data_next_ref, block_mask_ref, mask_next_ref):
        return (b, n, i, 0)

    def kv_index_map(b, n, i, j, data_next_ref, block_mask_ref, mask_next_ref):
        return (b, n // group, data_next_ref[n, i, j], 0)   # the j-th block on i's list

    def mask_index_map(b, n, i, j, data_next_ref, block_mask_ref, mask_next_ref):
        return (mask_next_ref[n, i, j], 0, 0)

    q_spec = pl.BlockSpec((None, None, block_q, H), q_index_map)
    kv_spec = pl.BlockSpec((None, None, block_kv, H), kv_index_map)
    return pl.pallas_call(
        functools.partial(splash_kernel, sm_scale=sm_scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=3,
            grid=(B, N, T // block_q, data_next.shape[-1]),
            in_specs=[q_spec, kv_spec, kv_spec,
                      pl.BlockSpec((None, block_q, block_kv), mask_index_map)],
            out_specs=q_spec,
            scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32),
                            pltpu.VMEM((block_q, 1), jnp.float32),
                            pltpu.VMEM((block_q, H), jnp.float32)]),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(data_next, block_mask, mask_next, q, k, v, mask_blocks)


# 6. splash.dedup — one stored block per partial pattern ------------------------

def dedup_blocks(mask, block_q, block_kv):
    mask = np.asarray(mask, dtype=bool)
    categories = block_categories(mask, block_q, block_kv)
    *heads, T, S = mask.shape
    blocks = mask.reshape(*heads, T // block_q, block_q, S // block_kv, block_kv)
    blocks = blocks.swapaxes(-3, -2)     # [..., T/block_q, S/block_kv, block_q, block_kv]
    index_of = {}                        # a pattern's bytes -> its place in `stored`
    stored = []
    block_index = np.zeros(categories.shape, np.int32)
    for at in zip(*np.nonzero(categories == PARTIAL)):   # row-major: first seen, first stored
        pattern = blocks[at]
        key = pattern.tobytes()
        if key not in index_of:
            index_of[key] = len(stored)
            stored.append(pattern)
        block_index[at] = index_of[key]
    if not stored:   # no partial block: one block all the same, never read
        stored.append(np.zeros((block_q, block_kv), dtype=bool))
    return np.stack(stored), block_index


# 7. splash.multihead — the public API ---------------------------------------------

def splash_attention(q, k, v, mask, *, sm_scale=None, block_q=128, block_kv=128):
    """Block-sparse attention with Pallas TPU kernels.

    q: [B, N, T, H] queries; k, v: [B, K, S, H] keys and values, K dividing N: query
        head n attends with K/V head n // (N // K). Any T, S >= 1.
    mask: concrete booleans (a NumPy array or a concrete jax.Array), [T, S] for every
        head or [N, T, S] per query head: query t sees key s where mask[..., t, s].
        Never traced: what the kernel needs to know about it is computed in NumPy.
    sm_scale: scale of the scores q k^T; None means 1 / sqrt(H).
    block_q, block_kv: block sizes along T and S, positive multiples of 8; a block
        longer than its sequence shrinks to it.

    Returns o [B, N, T, H] in q's dtype (float32 accumulation inside). A query that
    sees no key gets 0. Only the (q block, kv block) pairs with a visible key are
    computed or fetched; a partly visible block reads its mask from a store that
    holds each distinct pattern once. Raises ValueError, naming the argument, on
    inconsistent inputs.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"splash_attention: q, k and v must be 4-D, [B, N, T, H] and "
                         f"[B, K, S, H]; got shapes {q.shape}, {k.shape}, {v.shape}")
    B, N, T, H = q.shape
    _, K, S, _ = k.shape
    if k.shape != v.shape:
        raise ValueError(f"splash_attention: k and v must have one shape; got {k.shape} "
                         f"and {v.shape}")
    if k.shape[0] != B or k.shape[3] != H:
        raise ValueError(f"splash_attention: k and v must be [B={B}, K, S, H={H}] like q; "
                         f"got {k.shape}")
    if K < 1 or N % K:
        raise ValueError(f"splash_attention: the number of query heads N={N} must be a "
                         f"multiple of the number of K/V heads K={K}")
    if T < 1 or S < 1:
        raise ValueError(f"splash_attention: T={T} and S={S} must be at least 1")
    if not (q.dtype == k.dtype == v.dtype) or not jnp.issubdtype(q.dtype, jnp.floating):
        raise ValueError(f"splash_attention: q, k and v must share one floating dtype; got "
                         f"{q.dtype}, {k.dtype}, {v.dtype}")
    mask = np.asarray(mask)
    if mask.dtype != bool or mask.shape not in ((T, S), (N, T, S)):
        raise ValueError(f"splash_attention: mask must be booleans [T={T}, S={S}] or "
                         f"[N={N}, T, S]; got {mask.dtype} {mask.shape}")
    for name, block in (("block_q", block_q), ("block_kv", block_kv)):
        if not isinstance(block, (int, np.integer)) or block <= 0 or block % 8:
            raise ValueError(f"splash_attention: {name}={block!r} must be a positive "
                             "multiple of 8 (the TPU's sublane count)")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)

    # Whole blocks only: shrink a block longer than its (rounded-up) sequence, then pad
    # the sequences to a multiple of it. Padding is only more mask: padded keys are
    # hidden from every query, and padded queries see nothing and are cut off.
    block_q = min(int(block_q), -(-T // 8) * 8)
    block_kv = min(int(block_kv), -(-S // 8) * 8)
    T_padded, S_padded = -(-T // block_q) * block_q, -(-S // block_kv) * block_kv
    heads = mask if mask.ndim == 3 else mask[None]    # [1 or N, T, S]
    heads = np.pad(heads, ((0, 0), (0, T_padded - T), (0, S_padded - S)))

    # The tables, per mask head: which kv block each step visits, what it does there,
    # and which stored mask block a partial step reads.
    data_next, block_mask = compact(block_categories(heads, block_q, block_kv))
    mask_blocks, block_index = dedup_blocks(heads, block_q, block_kv)
    mask_next = fill_ahead(np.take_along_axis(block_index, data_next, axis=-1),
                           block_mask == PARTIAL)
    tables = [np.broadcast_to(table, (N, *table.shape[1:]))   # one table per query head
              for table in (data_next, block_mask, mask_next)]

    q = jnp.pad(q, ((0, 0), (0, 0), (0, T_padded - T), (0, 0)))
    k = jnp.pad(k, ((0, 0), (0, 0), (0, S_padded - S), (0, 0)))
    v = jnp.pad(v, ((0, 0), (0, 0), (0, S_padded - S), (0, 0)))
    o = splash_call(q, k, v, *tables, mask_blocks, sm_scale=float(sm_scale))
    return o[:, :, :T]
