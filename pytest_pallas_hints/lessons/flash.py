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
import math

from ..checking import check
from ..frozen import np


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


def check_grid(yours, q, k, v):
    dtype, S = q.dtype, k.shape[2]

    def last_kv_block_only():  # the state started afresh at every kv step
        kv = slice(S - 128, S)
        return attention(q, k[:, :, kv], v[:, :, kv])[0].astype(dtype)

    def first_kv_block_dropped():  # reset after the fold of kv block 0
        kv = slice(128, S)
        return attention(q, k[:, :, kv], v[:, :, kv])[0].astype(dtype)

    check(yours, attention(q, k, v)[0].astype(dtype), blocks=(1, 1, 128, None), axes="B N T H",
          tolerance=1e-4 if dtype == np.float32 else None,
          likely={"last_kv_block_only": last_kv_block_only,
                  "first_kv_block_dropped": first_kv_block_dropped,
                  "no_scale": lambda: attention(q, k, v, sm_scale=1.0)[0].astype(dtype)})


def check_causal(yours, q, k, v, block_q=128, block_kv=128):
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

    check(yours, wrong(causal=True)(), blocks=(1, 1, block_q, None), axes="B N T H",
          tolerance=1e-4,
          likely={"diagonal_excluded": diagonal_excluded,
                  "unmasked_diagonal_blocks": unmasked_diagonal_blocks,
                  "mask_block_local": mask_block_local,
                  "mask_ignored": wrong(),
                  "bottom_right": wrong(causal=True, diagonal=S - T)})
