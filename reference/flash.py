"""Flash attention — reference solutions.

Same functions and signatures as exercises/flash.py. Learners see these
through `pytest --hint=3`, so they are written as code worth copying.

`flash_attention` at the end is the chapter's public API: any T, S >= 1
(padded to whole blocks, padded keys masked), grouped-query attention
(K divides N), float32 or bfloat16 in (float32 accumulation, input dtype
out), causal or not, differentiable with Pallas kernels forward and
backward.
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


# 1. flash.dense — attention in plain JAX ------------------------------------

def attention(q, k, v, *, causal=False, sm_scale=None):
    B, N, T, H = q.shape
    K, S = k.shape[1], k.shape[2]
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    k = jnp.repeat(k, N // K, axis=1)   # query head n reads K/V head n // (N // K)
    v = jnp.repeat(v, N // K, axis=1)
    s = jnp.einsum("bnth,bnsh->bnts", q, k, preferred_element_type=jnp.float32) * sm_scale
    if causal:  # top-left aligned: query i sees keys 0..i
        visible = jnp.arange(S)[None, :] <= jnp.arange(T)[:, None]
        s = jnp.where(visible, s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bnts,bnsh->bnth", p, v, preferred_element_type=jnp.float32)
    return o.astype(q.dtype)


# 2. flash.online — online softmax ---------------------------------------------

def online_softmax_step(m, l, acc, s, v):
    m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
    alpha = jnp.exp(m - m_new)          # converts sums taken against m to m_new
    p = jnp.exp(s - m_new)
    l_new = alpha * l + jnp.sum(p, axis=-1, keepdims=True)
    acc_new = alpha * acc + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return m_new, l_new, acc_new


def online_attention(q, k, v, *, block_kv=128):
    """PROVIDED: softmax(q k^T / sqrt(H)) v for one head, one chunk of keys at a time."""
    (T, H), S = q.shape, k.shape[0]
    m = jnp.full((T, 1), -jnp.inf, jnp.float32)   # running max of each row
    l = jnp.zeros((T, 1), jnp.float32)            # running sum of exp(s - m)
    acc = jnp.zeros((T, H), jnp.float32)          # running sum of exp(s - m) @ v
    for start in range(0, S, block_kv):
        chunk = slice(start, start + block_kv)
        s = jnp.dot(q, k[chunk].T, preferred_element_type=jnp.float32) / math.sqrt(H)
        m, l, acc = online_softmax_step(m, l, acc, s, v[chunk])
    return (acc / l).astype(q.dtype)


# 3. flash.kv_loop — one Q block, a loop over KV blocks -------------------------

def one_head_kernel(q_ref, k_ref, v_ref, o_ref, *, sm_scale, block_kv):
    block_q, H = q_ref.shape
    q = q_ref[...]

    def fold_kv_block(j, carry):
        start = pl.multiple_of(j * block_kv, block_kv)
        k = k_ref[pl.ds(start, block_kv), :]
        v = v_ref[pl.ds(start, block_kv), :]
        s = jnp.einsum("qh,kh->qk", q, k, preferred_element_type=jnp.float32) * sm_scale
        return online_softmax_step(*carry, s, v)

    start = (jnp.full((block_q, 1), -jnp.inf, jnp.float32),
             jnp.zeros((block_q, 1), jnp.float32),
             jnp.zeros((block_q, H), jnp.float32))
    m, l, acc = jax.lax.fori_loop(0, k_ref.shape[0] // block_kv, fold_kv_block, start)
    o_ref[...] = (acc / l).astype(o_ref.dtype)


def flash_one_head(q, k, v, *, sm_scale=None, block_q=128, block_kv=128):
    (T, H), (S, _) = q.shape, k.shape
    if T % block_q or S % block_kv:
        raise ValueError(f"flash_one_head: T={T} must be a multiple of block_q={block_q} "
                         f"and S={S} of block_kv={block_kv}")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    whole = pl.BlockSpec((S, H), lambda i: (0, 0))   # all of K (or V), fetched once
    return pl.pallas_call(
        functools.partial(one_head_kernel, sm_scale=sm_scale, block_kv=block_kv),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(T // block_q,),
        in_specs=[pl.BlockSpec((block_q, H), lambda i: (i, 0)), whole, whole],
        out_specs=pl.BlockSpec((block_q, H), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(q, k, v)


# 4. flash.grid — a (B, N, q, kv) grid with VMEM scratch -------------------------

def flash_kernel(q_ref, k_ref, v_ref, o_ref, m_scratch, l_scratch, acc_scratch, *, sm_scale):
    kv = pl.program_id(3)

    @pl.when(kv == 0)
    def start_q_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)
        acc_scratch[...] = jnp.zeros_like(acc_scratch)

    s = jnp.einsum("qh,kh->qk", q_ref[...], k_ref[...],
                   preferred_element_type=jnp.float32) * sm_scale
    m, l, acc = online_softmax_step(m_scratch[...], l_scratch[...], acc_scratch[...],
                                    s, v_ref[...])
    m_scratch[...] = m
    l_scratch[...] = l
    acc_scratch[...] = acc

    @pl.when(kv == pl.num_programs(3) - 1)
    def finish_q_block():
        o_ref[...] = (acc_scratch[...] / l_scratch[...]).astype(o_ref.dtype)


def flash_grid(q, k, v, *, sm_scale=None, block_q=128, block_kv=128):
    B, N, T, H = q.shape
    S = k.shape[2]
    if T % block_q or S % block_kv:
        raise ValueError(f"flash_grid: T={T} must be a multiple of block_q={block_q} "
                         f"and S={S} of block_kv={block_kv}")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    # None squeezes the batch and head dims away: the kernel sees (block, H) refs.
    q_spec = pl.BlockSpec((None, None, block_q, H), lambda b, n, i, j: (b, n, i, 0))
    kv_spec = pl.BlockSpec((None, None, block_kv, H), lambda b, n, i, j: (b, n, j, 0))
    return pl.pallas_call(
        functools.partial(flash_kernel, sm_scale=sm_scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(B, N, T // block_q, S // block_kv),
        in_specs=[q_spec, kv_spec, kv_spec],
        out_specs=q_spec,
        scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32),    # m
                        pltpu.VMEM((block_q, 1), jnp.float32),    # l
                        pltpu.VMEM((block_q, H), jnp.float32)],   # acc
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v)


# 5. flash.causal — skip the blocks above the diagonal, and never fetch them ------

def causal_kernel(q_ref, k_ref, v_ref, o_ref, m_scratch, l_scratch, acc_scratch, *,
                  sm_scale):
    i, kv = pl.program_id(2), pl.program_id(3)
    block_q, block_kv = q_ref.shape[0], k_ref.shape[0]

    @pl.when(kv == 0)
    def start_q_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)
        acc_scratch[...] = jnp.zeros_like(acc_scratch)

    # The block's first key is at or before its last query: some key is visible.
    @pl.when(kv * block_kv <= (i + 1) * block_q - 1)
    def fold_kv_block():
        s = jnp.einsum("qh,kh->qk", q_ref[...], k_ref[...],
                       preferred_element_type=jnp.float32) * sm_scale
        row = i * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
        col = kv * block_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where(col <= row, s, MASK_VALUE)
        m, l, acc = online_softmax_step(m_scratch[...], l_scratch[...], acc_scratch[...],
                                        s, v_ref[...])
        m_scratch[...] = m
        l_scratch[...] = l
        acc_scratch[...] = acc

    @pl.when(kv == pl.num_programs(3) - 1)
    def finish_q_block():
        o_ref[...] = (acc_scratch[...] / l_scratch[...]).astype(o_ref.dtype)


def flash_causal(q, k, v, *, sm_scale=None, block_q=128, block_kv=128):
    B, N, T, H = q.shape
    S = k.shape[2]
    if T % block_q or S % block_kv:
        raise ValueError(f"flash_causal: T={T} must be a multiple of block_q={block_q} "
                         f"and S={S} of block_kv={block_kv}")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)

    def q_index_map(b, n, i, kv):
        return (b, n, i, 0)

    def kv_index_map(b, n, i, kv):
        # Past the last block query block i needs, keep asking for that block: the
        # index does not change, so the pipeline fetches nothing for skipped steps.
        last = ((i + 1) * block_q - 1) // block_kv
        return (b, n, jnp.minimum(kv, last), 0)

    q_spec = pl.BlockSpec((None, None, block_q, H), q_index_map)
    kv_spec = pl.BlockSpec((None, None, block_kv, H), kv_index_map)
    return pl.pallas_call(
        functools.partial(causal_kernel, sm_scale=sm_scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(B, N, T // block_q, S // block_kv),
        in_specs=[q_spec, kv_spec, kv_spec],
        out_specs=q_spec,
        scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, H), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v)


# 6. flash.logsumexp — the forward the backward needs ------------------------------

def flash_fwd_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, m_scratch, l_scratch, acc_scratch,
                     *, sm_scale, causal, kv_len):
    i, kv = pl.program_id(2), pl.program_id(3)
    block_q, block_kv = q_ref.shape[0], k_ref.shape[0]

    @pl.when(kv == 0)
    def start_q_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)
        acc_scratch[...] = jnp.zeros_like(acc_scratch)

    needed = kv * block_kv <= (i + 1) * block_q - 1 if causal else True

    @pl.when(needed)
    def fold_kv_block():
        s = jnp.einsum("qh,kh->qk", q_ref[...], k_ref[...],
                       preferred_element_type=jnp.float32) * sm_scale
        if causal or kv_len is not None:
            row = i * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            col = kv * block_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            visible = (col <= row) if causal else True
            if kv_len is not None:  # keys past kv_len are padding
                visible = jnp.logical_and(visible, col < kv_len)
            s = jnp.where(visible, s, MASK_VALUE)
        m, l, acc = online_softmax_step(m_scratch[...], l_scratch[...], acc_scratch[...],
                                        s, v_ref[...])
        m_scratch[...] = m
        l_scratch[...] = l
        acc_scratch[...] = acc

    @pl.when(kv == pl.num_programs(3) - 1)
    def finish_q_block():
        l = l_scratch[...]
        o_ref[...] = (acc_scratch[...] / l).astype(o_ref.dtype)
        lse_ref[...] = m_scratch[...] + jnp.log(l)


def flash_forward(q, k, v, *, causal=False, sm_scale=None, block_q=128, block_kv=128,
                  kv_len=None):
    """(o [B, N, T, H], lse [B, N, T] float32) for block-aligned q [B, N, T, H] and
    k, v [B, K, S, H]; keys at or past kv_len (when given) are padding."""
    B, N, T, H = q.shape
    K, S = k.shape[1], k.shape[2]
    if T % block_q or S % block_kv:
        raise ValueError(f"flash_forward: T={T} must be a multiple of block_q={block_q} "
                         f"and S={S} of block_kv={block_kv}")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    group = N // K   # query heads per K/V head (puzzle 8); 1 when K == N

    def q_index_map(b, n, i, kv):
        return (b, n, i, 0)

    def kv_index_map(b, n, i, kv):
        if causal:  # skipped blocks re-name the last needed one: nothing is fetched
            kv = jnp.minimum(kv, ((i + 1) * block_q - 1) // block_kv)
        return (b, n // group, kv, 0)

    q_spec = pl.BlockSpec((None, None, block_q, H), q_index_map)
    kv_spec = pl.BlockSpec((None, None, block_kv, H), kv_index_map)
    # lse is stored as [B, N, T, 1]: a (block_q, 1) block obeys the TPU's (8, 128)
    # rule because its last dim equals the array's.
    lse_spec = pl.BlockSpec((None, None, block_q, 1), q_index_map)
    o, lse = pl.pallas_call(
        functools.partial(flash_fwd_kernel, sm_scale=sm_scale, causal=causal, kv_len=kv_len),
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((B, N, T, 1), jnp.float32)],
        grid=(B, N, T // block_q, S // block_kv),
        in_specs=[q_spec, kv_spec, kv_spec],
        out_specs=[q_spec, lse_spec],
        scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, H), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v)
    return o, lse[..., 0]


# 7. flash.backward — dq, dk, dv as kernels, and jax.grad ---------------------------

def flash_dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, dq_scratch,
                    *, sm_scale, causal, kv_len):
    i, kv = pl.program_id(2), pl.program_id(3)
    block_q, block_kv = q_ref.shape[0], k_ref.shape[0]

    @pl.when(kv == 0)
    def start_q_block():
        dq_scratch[...] = jnp.zeros_like(dq_scratch)

    needed = kv * block_kv <= (i + 1) * block_q - 1 if causal else True

    @pl.when(needed)
    def accumulate():
        q, k, v, do = q_ref[...], k_ref[...], v_ref[...], do_ref[...]
        s = jnp.einsum("qh,kh->qk", q, k, preferred_element_type=jnp.float32) * sm_scale
        if causal or kv_len is not None:
            row = i * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            col = kv * block_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            visible = (col <= row) if causal else True
            if kv_len is not None:
                visible = jnp.logical_and(visible, col < kv_len)
            s = jnp.where(visible, s, MASK_VALUE)
        p = jnp.exp(s - lse_ref[...])                      # the forward's softmax, again
        dp = jnp.einsum("qh,kh->qk", do, v, preferred_element_type=jnp.float32)
        ds = p * (dp - delta_ref[...])                     # softmax backward
        dq_scratch[...] += jnp.dot(ds.astype(k.dtype), k,
                                   preferred_element_type=jnp.float32) * sm_scale

    @pl.when(kv == pl.num_programs(3) - 1)
    def finish_q_block():
        dq_ref[...] = dq_scratch[...].astype(dq_ref.dtype)


def flash_dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref,
                     dk_scratch, dv_scratch, *, sm_scale, causal, kv_len):
    kv, g, i = pl.program_id(2), pl.program_id(3), pl.program_id(4)
    block_q, block_kv = q_ref.shape[0], k_ref.shape[0]

    @pl.when((g == 0) & (i == 0))
    def start_kv_block():
        dk_scratch[...] = jnp.zeros_like(dk_scratch)
        dv_scratch[...] = jnp.zeros_like(dv_scratch)

    needed = kv * block_kv <= (i + 1) * block_q - 1 if causal else True

    @pl.when(needed)
    def accumulate():
        q, k, v, do = q_ref[...], k_ref[...], v_ref[...], do_ref[...]
        s = jnp.einsum("qh,kh->qk", q, k, preferred_element_type=jnp.float32) * sm_scale
        if causal or kv_len is not None:
            row = i * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            col = kv * block_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            visible = (col <= row) if causal else True
            if kv_len is not None:
                visible = jnp.logical_and(visible, col < kv_len)
            s = jnp.where(visible, s, MASK_VALUE)
        p = jnp.exp(s - lse_ref[...])
        dv_scratch[...] += jnp.dot(p.astype(do.dtype).T, do, preferred_element_type=jnp.float32)
        dp = jnp.einsum("qh,kh->qk", do, v, preferred_element_type=jnp.float32)
        ds = p * (dp - delta_ref[...])
        dk_scratch[...] += jnp.dot(ds.astype(q.dtype).T, q,
                                   preferred_element_type=jnp.float32) * sm_scale

    @pl.when((g == pl.num_programs(3) - 1) & (i == pl.num_programs(4) - 1))
    def finish_kv_block():
        dk_ref[...] = dk_scratch[...].astype(dk_ref.dtype)
        dv_ref[...] = dv_scratch[...].astype(dv_ref.dtype)


def flash_backward(q, k, v, o, lse, do, *, causal=False, sm_scale=None, block_q=128,
                   block_kv=128, kv_len=None):
    """(dq, dk, dv) of flash_forward's o for the cotangent do, from its residuals."""
    B, N, T, H = q.shape
    K, S = k.shape[1], k.shape[2]
    if T % block_q or S % block_kv:
        raise ValueError(f"flash_backward: T={T} must be a multiple of block_q={block_q} "
                         f"and S={S} of block_kv={block_kv}")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    group = N // K
    num_q, num_kv = T // block_q, S // block_kv
    # delta[t] = sum_h dO[t, h] * O[t, h]: the softmax backward's row term, once per row.
    delta = jnp.sum(do.astype(jnp.float32) * o.astype(jnp.float32), axis=-1, keepdims=True)
    lse = lse[..., None]
    kernel_args = dict(sm_scale=sm_scale, causal=causal, kv_len=kv_len)
    parallel = ("parallel", "parallel", "parallel")

    # dQ: like the forward, a query block accumulates over the KV blocks.
    def q_rows(b, n, i, kv):
        return (b, n, i, 0)

    def kv_rows(b, n, i, kv):
        if causal:
            kv = jnp.minimum(kv, ((i + 1) * block_q - 1) // block_kv)
        return (b, n // group, kv, 0)

    q_spec = pl.BlockSpec((None, None, block_q, H), q_rows)
    row_spec = pl.BlockSpec((None, None, block_q, 1), q_rows)
    kv_spec = pl.BlockSpec((None, None, block_kv, H), kv_rows)
    dq = pl.pallas_call(
        functools.partial(flash_dq_kernel, **kernel_args),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(B, N, num_q, num_kv),
        in_specs=[q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec],
        out_specs=q_spec,
        scratch_shapes=[pltpu.VMEM((block_q, H), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=parallel + ("arbitrary",)),
    )(q, k, v, do, lse, delta)

    # dK, dV: a KV block accumulates over every query head g of its group and
    # every query block i that sees it.
    def q_rows_of_group(b, h, kv, g, i):
        if causal:  # skipped blocks re-name the first needed one: nothing is fetched
            i = jnp.maximum(i, jnp.minimum(kv * block_kv // block_q, num_q - 1))
        return (b, h * group + g, i, 0)

    def kv_block(b, h, kv, g, i):
        return (b, h, kv, 0)

    q_spec = pl.BlockSpec((None, None, block_q, H), q_rows_of_group)
    row_spec = pl.BlockSpec((None, None, block_q, 1), q_rows_of_group)
    kv_spec = pl.BlockSpec((None, None, block_kv, H), kv_block)
    dk, dv = pl.pallas_call(
        functools.partial(flash_dkv_kernel, **kernel_args),
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
        grid=(B, K, num_kv, group, num_q),
        in_specs=[q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec],
        out_specs=[kv_spec, kv_spec],
        scratch_shapes=[pltpu.VMEM((block_kv, H), jnp.float32),
                        pltpu.VMEM((block_kv, H), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=parallel + ("arbitrary", "arbitrary")),
    )(q, k, v, do, lse, delta)
    return dq, dk, dv


def flash_core(q, k, v, *, causal=False, sm_scale=None, block_q=128, block_kv=128,
               kv_len=None):
    """flash_forward's o on block-aligned inputs, with flash_backward as its VJP."""
    static = dict(causal=causal, sm_scale=sm_scale, block_q=block_q, block_kv=block_kv,
                  kv_len=kv_len)

    @jax.custom_vjp
    def attend(q, k, v):
        return flash_forward(q, k, v, **static)[0]

    def attend_forward(q, k, v):
        o, lse = flash_forward(q, k, v, **static)
        return o, (q, k, v, o, lse)          # the residuals the backward reads

    def attend_backward(residuals, do):
        return flash_backward(*residuals, do, **static)

    attend.defvjp(attend_forward, attend_backward)
    return attend(q, k, v)


# 8. flash.gqa — grouped-query attention, and the public API ------------------------

def flash_attention(q, k, v, *, causal=False, sm_scale=None, block_q=128, block_kv=128):
    """Flash attention with Pallas TPU kernels, forward and backward.

    q: [B, N, T, H] queries; k, v: [B, K, S, H] keys and values, K dividing N:
        query head n attends with K/V head n // (N // K). Any T, S >= 1.
    causal: top-left causal mask, query i sees keys j <= i (also when T != S).
    sm_scale: scale of the scores q k^T; None means 1 / sqrt(H).
    block_q, block_kv: block sizes along T and S, positive multiples of 8; a block
        longer than its sequence shrinks to it.

    Returns o [B, N, T, H] in q's dtype (float32 accumulation inside), differentiable
    in q, k and v. Raises ValueError, naming the argument, on inconsistent inputs.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"flash_attention: q, k and v must be 4-D, [B, N, T, H] and "
                         f"[B, K, S, H]; got shapes {q.shape}, {k.shape}, {v.shape}")
    B, N, T, H = q.shape
    _, K, S, _ = k.shape
    if k.shape != v.shape:
        raise ValueError(f"flash_attention: k and v must have one shape; got {k.shape} "
                         f"and {v.shape}")
    if k.shape[0] != B or k.shape[3] != H:
        raise ValueError(f"flash_attention: k and v must be [B={B}, K, S, H={H}] like q; "
                         f"got {k.shape}")
    if K < 1 or N % K:
        raise ValueError(f"flash_attention: the number of query heads N={N} must be a "
                         f"multiple of the number of K/V heads K={K}")
    if T < 1 or S < 1:
        raise ValueError(f"flash_attention: T={T} and S={S} must be at least 1")
    if not (q.dtype == k.dtype == v.dtype) or not jnp.issubdtype(q.dtype, jnp.floating):
        raise ValueError(f"flash_attention: q, k and v must share one floating dtype; got "
                         f"{q.dtype}, {k.dtype}, {v.dtype}")
    for name, block in (("block_q", block_q), ("block_kv", block_kv)):
        if not isinstance(block, (int, np.integer)) or block <= 0 or block % 8:
            raise ValueError(f"flash_attention: {name}={block!r} must be a positive "
                             "multiple of 8 (the TPU's sublane count)")
    if sm_scale is None:
        sm_scale = 1 / math.sqrt(H)
    sm_scale = float(sm_scale)

    # Whole blocks only: shrink a block that is longer than its (rounded-up) sequence,
    # then pad the sequence to a multiple of it. Padded keys are masked (kv_len);
    # padded queries are cut off the output, so their gradient is zero.
    block_q = min(int(block_q), -(-T // 8) * 8)
    block_kv = min(int(block_kv), -(-S // 8) * 8)
    T_padded, S_padded = -(-T // block_q) * block_q, -(-S // block_kv) * block_kv
    q = jnp.pad(q, ((0, 0), (0, 0), (0, T_padded - T), (0, 0)))
    k = jnp.pad(k, ((0, 0), (0, 0), (0, S_padded - S), (0, 0)))
    v = jnp.pad(v, ((0, 0), (0, 0), (0, S_padded - S), (0, 0)))
    o = flash_core(q, k, v, causal=causal, sm_scale=sm_scale, block_q=block_q,
                   block_kv=block_kv, kv_len=S if S_padded != S else None)
    return o[:, :, :T]
