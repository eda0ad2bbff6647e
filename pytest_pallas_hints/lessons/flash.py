"""The flash chapter's lesson machinery: what exercises/test_flash.py knows about
flash attention beyond the right answer.

* float64 attention (scores, attention, its gradients) with the switches that make
  known wrong answers of it: no scale or the wrong one, the wrong K/V head, the mask
  off the diagonal, the backward without its row term;
* the online recurrence with its rescaling left out;
* the causal schedule's budgets: which (q block, kv block) pairs a kernel computes,
  how many K/V blocks a clamped index map fetches, the flops of their dots, and the
  bytes the backward's two kernels move;
* the chapter's checks that word a learner's sentence (the argument check).
"""
import functools
import math

import jax

from ..checking import fail, raised
from ..frozen import np
from .common import cdiv


# --- the causal schedule: the tiles computed, the K/V blocks fetched, their flops ---

def visible_blocks(T, S, block_q, block_kv, causal=True):
    """(i, j) of every (q block, kv block) pair a kernel must compute: with causal,
    those whose first key is at or before the q block's last query."""
    return [(i, j) for i in range(T // block_q) for j in range(S // block_kv)
            if not causal or j * block_kv <= (i + 1) * block_q - 1]


def kv_fetches(T, S, block_q, block_kv, causal=True):
    """K (or V) blocks one head fetches over its (q, kv) steps when the kv index map
    is clamped to the last block a q block needs: a block is fetched whenever the
    index differs from the previous step's."""
    last = [((i + 1) * block_q - 1) // block_kv if causal else S // block_kv - 1
            for i in range(T // block_q)]
    seq = [min(j, last[i]) for i in range(T // block_q) for j in range(S // block_kv)]
    return 1 + sum(a != b for a, b in zip(seq, seq[1:]))


def dot_flops(blocks, dots, block_q, block_kv, H):
    """Flops of `dots` (block_q x H) @ (H x block_kv)-sized dots in each of `blocks`."""
    return blocks * dots * 2 * block_q * block_kv * H


# --- attention in float64 NumPy: the expected values -------------------------

def scores(q, k, *, causal=False, sm_scale=None, kv_len=None, head_of=None, diagonal=0):
    """s [B, N, T, S] in float64, -inf where a key is hidden. Query head n reads K/V
    head head_of(n) (default n // (N // K)); causal keeps keys j <= i + diagonal."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    (_, N, T, H), (K, S) = q.shape, k.shape[1:3]
    heads = [head_of(n) if head_of else n // (N // K) for n in range(N)]
    s = np.einsum("bnth,bnsh->bnts", q, k[:, heads])
    s *= 1 / math.sqrt(H) if sm_scale is None else sm_scale
    row, col = np.arange(T)[:, None], np.arange(S)[None, :]
    visible = np.ones((T, S), bool)
    if causal:
        visible &= col <= row + diagonal
    if kv_len is not None:
        visible &= col < kv_len
    return np.where(visible, s, -np.inf), heads


def attention(q, k, v, **options):
    """(o, lse) in float64: softmax(s) @ v and logsumexp(s) over the keys."""
    s, heads = scores(q, k, **options)
    m = s.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):  # a wrong answer may hide every key of a row
        e = np.exp(s - m)
    l = e.sum(axis=-1, keepdims=True)
    o = (e / l) @ np.asarray(v, np.float64)[:, heads]
    return o, (m + np.log(l))[..., 0]


def attention_grads(q, k, v, do, *, delta=True, **options):
    """dq, and dk, dv per query head [B, N, S, H] (sum them over a group for [B, K, S, H])."""
    s, heads = scores(q, k, **options)
    q, do = np.asarray(q, np.float64), np.asarray(do, np.float64)
    k, v = np.asarray(k, np.float64)[:, heads], np.asarray(v, np.float64)[:, heads]
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = p @ v
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (do * o).sum(axis=-1, keepdims=True)) if delta else p * dp
    scale = 1 / math.sqrt(q.shape[-1])
    return ds @ k * scale, np.swapaxes(ds, -1, -2) @ q * scale, np.swapaxes(p, -1, -2) @ do


def per_group(x, K):
    """[B, N, S, H] per query head -> [B, K, S, H], summed over each group's heads."""
    B, N, S, H = x.shape
    return x.reshape(B, K, N // K, S, H).sum(axis=2)


def strided_group(x, K):
    """[B, N, S, H] -> [B, K, S, H] summed over heads h, h + K, h + 2K...: query head
    h + g * K taken for group h, the layout of n % K, not n // (N // K)."""
    B, N, S, H = x.shape
    return x.reshape(B, N // K, K, S, H).sum(axis=1)


def inputs(rng, B, N, K, T, S, H, dtype="float32"):
    return (rng.normal((B, N, T, H), dtype), rng.normal((B, K, S, H), dtype),
            rng.normal((B, K, S, H), dtype))


def online_variants(q, k, v, block_kv, *, rescale_l, rescale_acc):
    """The online recurrence in NumPy, with the alpha rescaling optionally left out."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    m = np.full((q.shape[0], 1), -np.inf)
    l, acc = np.zeros_like(m), np.zeros((q.shape[0], v.shape[1]))
    for start in range(0, k.shape[0], block_kv):
        s = q @ k[start:start + block_kv].T / math.sqrt(q.shape[1])
        m_new = np.maximum(m, s.max(axis=1, keepdims=True))
        alpha, p = np.exp(m - m_new), np.exp(s - m_new)
        l = (alpha if rescale_l else 1) * l + p.sum(axis=1, keepdims=True)
        acc = (alpha if rescale_acc else 1) * acc + p @ v[start:start + block_kv]
        m = m_new
    return (acc / l).astype(np.float32)


# --- per puzzle: known wrong answers ------------------------------------------

def grid_mistakes(q, k, v):
    """Known wrong flash_grid(q, k, v) outputs (blocks of 128), for check(..., likely=)."""
    dtype, S = q.dtype, k.shape[2]

    def last_kv_block_only():  # the state started afresh at every kv step
        kv = slice(S - 128, S)
        return attention(q, k[:, :, kv], v[:, :, kv])[0].astype(dtype)

    def first_kv_block_dropped():  # reset after the fold of kv block 0
        kv = slice(128, S)
        return attention(q, k[:, :, kv], v[:, :, kv])[0].astype(dtype)

    def kv_follows_q():  # K and V's index map (b, n, i, 0): q block i sees kv block i
        T = q.shape[2]
        o = np.zeros(q.shape)
        for i in range(T // 128):
            rows = slice(i * 128, (i + 1) * 128)
            o[:, :, rows] = attention(q[:, :, rows], k[:, :, rows], v[:, :, rows])[0]
        return o.astype(dtype)

    return {"last_kv_block_only": last_kv_block_only,
            "first_kv_block_dropped": first_kv_block_dropped,
            "no_scale": lambda: attention(q, k, v, sm_scale=1.0)[0].astype(dtype),
            "scale_one_over_h": lambda: attention(q, k, v, sm_scale=1 / q.shape[-1])[0]
            .astype(dtype),
            **({"kv_follows_q": kv_follows_q} if S >= q.shape[2] else {})}


def causal_mistakes(q, k, v, block_q=128, block_kv=128):
    """Known wrong flash_causal(q, k, v) outputs, for check(..., likely=)."""
    T, S = q.shape[2], k.shape[2]

    def wrong(**options):
        return lambda: attention(q, k, v, **options)[0].astype(np.float32)

    def diagonal_excluded():  # query 0 sees no key: a finite mask spreads it evenly
        o = attention(q, k, v, causal=True, diagonal=-1)[0]
        seen = ((block_q - 1) // block_kv + 1) * block_kv   # the keys q block 0 visits
        o[:, :, 0] = np.asarray(v[:, :, :seen], np.float64).mean(axis=2)
        return o.astype(np.float32)

    def unmasked_diagonal_blocks():  # blocks skipped, but no mask inside the kept ones
        row, col = np.arange(T)[:, None] // block_q, np.arange(S)[None, :] // block_kv
        s = np.where(col * block_kv <= (row + 1) * block_q - 1, scores(q, k)[0], -np.inf)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return ((e / e.sum(axis=-1, keepdims=True)) @ np.asarray(v, np.float64)).astype(np.float32)

    def mask_block_local():  # row and column counted from each block's start
        row, col = np.arange(T)[:, None], np.arange(S)[None, :]
        keep = (col // block_kv * block_kv <= row // block_q * block_q + block_q - 1) \
            & (col % block_kv <= row % block_q)
        s = np.where(keep, scores(q, k)[0], -np.inf)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return ((e / e.sum(axis=-1, keepdims=True)) @ np.asarray(v, np.float64)).astype(np.float32)

    return {"diagonal_excluded": diagonal_excluded,
            "unmasked_diagonal_blocks": unmasked_diagonal_blocks,
            "mask_block_local": mask_block_local,
            "mask_ignored": wrong(),
            "bottom_right": wrong(causal=True, diagonal=S - T)}


def dense_mistakes(q, k, v, causal, dtype):
    """Known wrong attention(q, k, v, causal=causal) outputs, for check(..., likely=)."""
    H, K, T, S = q.shape[-1], k.shape[1], q.shape[2], k.shape[2]

    def wrong(**options):
        return lambda: attention(q, k, v, **options)[0].astype(dtype)

    return {"no_scale": wrong(causal=causal, sm_scale=1.0),
            "scale_one_over_h": wrong(causal=causal, sm_scale=1 / H),
            "scale_sqrt_h": wrong(causal=causal, sm_scale=math.sqrt(H)),
            "head_modulo": wrong(causal=causal, head_of=lambda n: n % K),
            "mask_ignored": wrong(),
            "bottom_right": wrong(causal=causal, diagonal=S - T),
            **({"mask_transposed": lambda: mask_transposed(q, k, v).astype(dtype)}
               if causal else {})}


def mask_transposed(q, k, v):
    """o of a causal mask built the wrong way round: query i sees keys j >= i."""
    s, heads = scores(q, k)
    T, S = s.shape[-2:]
    s = np.where(np.arange(S)[None, :] >= np.arange(T)[:, None], s, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ np.asarray(v, np.float64)[:, heads]


def online_mistakes(q, k, v, block_kv):
    """Known wrong online_attention(q, k, v) outputs (one head: q [T, H], k, v [S, H])."""
    S = k.shape[0]

    def variant(rescale_l, rescale_acc):
        return lambda: online_variants(q, k, v, block_kv, rescale_l=rescale_l,
                                       rescale_acc=rescale_acc)

    def last_chunk_only():  # the running max handed on was the old one
        last = slice((S - 1) // block_kv * block_kv, S)
        return attention(q[None, None], k[last][None, None],
                         v[last][None, None])[0][0, 0].astype(np.float32)

    return {"no_rescale": variant(False, False), "acc_not_rescaled": variant(True, False),
            "l_not_rescaled": variant(False, True), "last_chunk_only": last_chunk_only}


def kv_loop_mistakes(q, k, v, block_kv):
    """Known wrong flash_one_head(q, k, v) outputs (q [T, H], k, v [S, H])."""
    one = (None, None)

    def single(**options):
        return lambda: attention(q[one], k[one], v[one], **options)[0][0, 0].astype(np.float32)

    def unnormalised():  # acc at the end: the sum of exp(s - m) v, never divided by l
        s = scores(q[one], k[one])[0][0, 0]
        return (np.exp(s - s.max(axis=1, keepdims=True)) @ v).astype(np.float32)

    def first_kv_block_only():
        kv = slice(0, block_kv)
        return attention(q[one], k[kv][one], v[kv][one])[0][0, 0].astype(np.float32)

    def last_kv_block_dropped():   # a loop one step short
        kv = slice(0, k.shape[0] - block_kv)
        return attention(q[one], k[kv][one], v[kv][one])[0][0, 0].astype(np.float32)

    return {"unnormalised": unnormalised, "first_kv_block_only": first_kv_block_only,
            "no_scale": single(sm_scale=1.0),
            **({"last_kv_block_dropped": last_kv_block_dropped}
               if k.shape[0] > block_kv else {})}


def logsumexp_mistakes(q, k, v, causal, kv_len, dtype):
    """Known wrong o of flash_forward(q, k, v, causal=, kv_len=), for check(..., likely=)."""
    return {"padding_not_masked":
            lambda: attention(q, k, v, causal=causal)[0].astype(dtype),
            "kv_len_inclusive": lambda: attention(
                q, k, v, causal=causal, kv_len=kv_len and kv_len + 1)[0].astype(dtype)}


def lse_mistakes(q, k, causal, kv_len):
    """Known wrong lse of flash_forward: m + log(l) with one half left out."""
    def lse_part(part):  # m + log(l), with one half left out
        s = scores(q, k, causal=causal, kv_len=kv_len)[0]
        m = s.max(axis=-1)
        return lambda: (np.log(np.exp(s - m[..., None]).sum(axis=-1)) if part == "log_l"
                        else m).astype(np.float32)

    return {"lse_without_max": lse_part("log_l"), "max_only": lse_part("m")}


def backward_mistakes(q, k, v, do, dtype, **options):
    """Known wrong (dq, dk, dv) of flash_backward, one likely= per output."""
    def no_delta(n):
        return lambda: attention_grads(q, k, v, do, delta=False, **options)[n].astype(dtype)

    return [{"no_delta": no_delta(n)} for n in range(3)]


def gqa_mistakes(q, k, v, causal, dtype):
    """Known wrong o of flash_attention(q, k, v, causal=causal) (its blocks of 128
    shrunk to the sequence rounded up to 8), for check(..., likely=)."""
    K, S = k.shape[1], k.shape[2]

    def modulo():
        return attention(q, k, v, causal=causal, head_of=lambda n: n % K)[0].astype(dtype)

    def padded_keys_seen():  # S padded with zero keys up to a whole block, none masked
        block_kv = min(128, cdiv(S, 8) * 8)
        pad = ((0, 0), (0, 0), (0, -S % block_kv), (0, 0))
        return attention(q, np.pad(k, pad), np.pad(v, pad), causal=causal)[0].astype(dtype)

    return {"head_modulo": modulo, "padding_not_masked": padded_keys_seen}


def group_mistakes(expected, n, K, dtype):
    """Known wrong dk (n=1) or dv (n=2) [B, K, S, H] of grouped-query heads, from the
    expected gradients per query head (attention_grads)."""
    per_head = expected[n]
    G = per_head.shape[1] // K
    return {"last_head_only": lambda: per_head[:, G - 1::G].astype(dtype),
            "first_head_only": lambda: per_head[:, ::G].astype(dtype),
            "dk_dv_swapped": lambda: per_group(expected[3 - n], K).astype(dtype),
            "group_heads_strided": lambda: strided_group(per_head, K).astype(dtype)}


# --- budgets -------------------------------------------------------------------

def causal_traffic(q, k, block_q, block_kv):
    """(reference, minimum) bytes of flash_causal(q, k, v): q in and o out once; K and
    V blocks as the clamped index map fetches them (kv_fetches), at least those some
    query needs."""
    (B, N, T, H), S = q.shape, k.shape[2]
    kv_block = block_kv * H * k.itemsize
    needed = min(S // block_kv, ((T // block_q) * block_q - 1) // block_kv + 1)
    return (2 * q.nbytes + 2 * B * N * kv_fetches(T, S, block_q, block_kv) * kv_block,
            2 * q.nbytes + 2 * B * N * needed * kv_block)


def backward_traffic(B, N, H):
    """(reference, minimum) bytes of flash_backward at T = 256, S = 384, causal, blocks
    of 128, float32.

    T = 256, S = 384 in 128-blocks, causal: 2 q blocks, 3 K/V blocks. The dQ call
    fetches K/V blocks 0 and 1 once each (its kv index map clamped), q, dO, lse and
    delta once per q block; the dK/dV call fetches q block 0 for K/V block 0 only
    (its q-side index maps clamped from below) and q block 1 once, K/V once each. K/V
    block 2 is seen by no query: its first q block is capped at the last one.
    Tiles (128, H) f32; lse and delta rows (128, 1) f32; per head, B * N heads."""
    tile, row = 128 * H * 4, 128 * 4
    needed = B * N * ((18 * tile + 8 * row) + 8 * tile)   # read, then dq, dk, dv written
    minimum = B * N * ((10 * tile + 4 * row) + 8 * tile)  # every input read once
    return needed, minimum


# --- the chapter's own checks ----------------------------------------------------

def check_attention_rejects(flash_attention, bad, q, k, v, **static):
    """flash_attention(q, k, v, **static) raises a ValueError before any kernel is built
    (bad: the bad argument, in words)."""
    try:
        jax.eval_shape(functools.partial(flash_attention, **static), q, k, v)
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as error:
        fail("argument_check", f"flash_attention({bad}) should raise a ValueError that names "
             "the argument before any kernel is built; it failed later, inside JAX.",
             [("called", f"flash_attention({bad})"),
              ("raised", raised(error))])
    fail("argument_check", f"flash_attention({bad}) should raise a ValueError that names the "
         "argument; it raised nothing.",
         [("called", f"flash_attention({bad})"), ("raised", "nothing")])
