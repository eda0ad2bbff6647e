"""Flash attention: the online softmax, causal block skipping, the backward, GQA.

Run `pytest exercises/test_flash.py` after every edit; add `-k <puzzle>` for
one puzzle and `--hint` when stuck. Replace each `raise NotImplementedError`
with your code; keep the signatures.

The mental model of this chapter
--------------------------------
Attention gives every query a weighted average of the values, weighted by a
softmax of its scores against every key:

    o = softmax(q k^T * sm_scale) v          q [T, H], k [S, H], v [S, H] per head

Written plainly, it builds the score matrix s = q k^T: T x S numbers per head.
At T = S = 8192 that is 256 MiB of float32 per head, written to HBM and read
back, while q, k, v and o take 4 MiB each (H = 128). Plain attention is limited
not by its arithmetic but by moving that matrix.

Flash attention never builds it. It cuts q into blocks of block_q rows and K, V
into blocks of block_kv rows, and for each q block walks the K/V blocks, keeping
a running softmax (a max m, a sum l and an output accumulator acc per row) in
VMEM. Only one (block_q, block_kv) tile of scores exists at a time:

                 K/V blocks kv →
                  0       1       2       3
    q blocks  0 [ s00 ]─▶[ s01 ]─▶[ s02 ]─▶[ s03 ]──▶ o block 0 = acc / l
       i      1 [ s10 ]─▶[ s11 ]─▶[ s12 ]─▶[ s13 ]──▶ o block 1
       ↓      2 [ s20 ]─▶  ...                     ──▶ o block 2

HBM then only sees q, k, v and o (K and V once per q block). The whole chapter
is about that picture: first the math of the running softmax (puzzles 1-2), then
the kernel (3-4), skipping tiles a causal mask hides (5), what the backward needs
(6), the backward itself (7), and several query heads sharing one K/V head (8).

Puzzle 8's `flash_attention(q, k, v, *, causal, sm_scale, block_q, block_kv)`
is the chapter's public API: your pieces, put together, for any shapes.

Dimension letters: B batch, N query heads, K K/V heads (K divides N), T queries,
S keys, H head dim; block_q and block_kv the block sizes along T and S. Scores,
softmax statistics and accumulators are float32 whatever the input dtype.
The tests run your kernels on CPU in Pallas's TPU interpret mode, which fills
fresh buffers (outputs and scratch) with NaN, so a missing initialisation shows.
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
    """softmax(q k^T * sm_scale) v in plain JAX: the chapter's ground truth.

    q [B, N, T, H]: N heads of T queries;  k, v [B, K, S, H]: K heads of S keys
    and their values. Returns o [B, N, T, H] in q's dtype.

    Each query scores every key, turns the scores into weights with a softmax,
    and returns the weighted sum of the values:

        s[t, j] = q[t] . k[j] * sm_scale      scores        [B, N, T, S]
        p[t, :] = softmax(s[t, :])            weights       (each row sums to 1)
        o[t]    = sum_j p[t, j] v[j]          the output    [B, N, T, H]

    sm_scale=None means 1 / sqrt(H): a dot product of H random terms grows like
    sqrt(H), and unscaled scores would push the softmax towards a one-hot.

    causal=True: query t sees keys 0..t only, top-left aligned even when T != S.
    Hidden scores become -inf before the softmax (weight exp(-inf) = 0):

              key j → 0 1 2 3 4 5
        query t = 0     ■ · · · · ·       ■ seen
                  1     ■ ■ · · · ·       · hidden
                  2     ■ ■ ■ · · ·
                  3     ■ ■ ■ ■ · ·

    K may be smaller than N (grouped-query attention, puzzle 8): the N // K query
    heads of a group share one K/V head, consecutive heads together, so head n
    reads K/V head n // (N // K). jnp.repeat(k, N // K, axis=1) lays K out that way.

    Compute in float32 (jnp.einsum(..., preferred_element_type=jnp.float32),
    jax.nn.softmax) and cast o back to q's dtype.
    """
    raise NotImplementedError


# 2. flash.online — online softmax ---------------------------------------------

def online_softmax_step(m, l, acc, s, v):
    """Fold one chunk of keys into a running softmax; returns the new (m, l, acc).

    m   [R, 1]  the largest score seen so far in each of R query rows;
    l   [R, 1]  the sum, over the keys seen so far, of exp(score - m);
    acc [R, H]  the sum, over the keys seen so far, of exp(score - m) * v[key];
    s   [R, C]  this chunk's scores (float32, scaled);  v [C, H] its values.
    When every chunk is in, o = acc / l.

    Why subtract a max? exp overflows float32 beyond about 88, and scores can be
    large. softmax(s) = exp(s - m) / sum(exp(s - m)) for any m; with m the row
    max every exponential is at most 1.

    Why rescale? Chunk by chunk, the max can grow. Every term in l and acc was
    taken against the old max m; against the new max m_new, exp(s - m) must
    become exp(s - m_new) = exp(s - m) * exp(m - m_new). One factor,
    alpha = exp(m - m_new), converts the whole sum at once:

        chunk 1  scores [1, 3]  m = 3      l = e^-2 + e^0                  = 1.135
        chunk 2  scores [5, 2]  m_new = 5  alpha = e^(3 - 5)               = 0.135
                 l = alpha * 1.135 + (e^0 + e^-3) = 0.154 + 1.050          = 1.203
                   = e^-4 + e^-2 + e^0 + e^-3: as if all four keys came at once.

    acc takes the same alpha. At the start m = -inf and l = acc = 0: then
    alpha = exp(-inf) = 0 and there is nothing to rescale.

    The steps:
        m_new = max(m, row max of s)        jnp.max(s, axis=-1, keepdims=True)
        alpha = exp(m - m_new)
        p     = exp(s - m_new)
        l     = alpha * l + row sum of p
        acc   = alpha * acc + p @ v

    For p @ v write jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32):
    a TPU's matrix unit multiplies bfloat16 inputs and accumulates in float32.

    Plain JAX, no kernel: online_attention below runs it chunk by chunk, and every
    kernel of this chapter calls it unchanged.
    """
    raise NotImplementedError


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
    """Attention for one block of queries, looping over K and V block by block.

    q_ref (block_q, H): this program's queries;  k_ref, v_ref (S, H): all the keys
    and values, in VMEM;  o_ref (block_q, H).

    Why not one softmax over all S keys? A q block's scores are block_q x S
    floats: 16 MiB at block_q = 128, S = 32768, too much for VMEM (tens of MiB,
    shared with the inputs). The online softmax needs one (block_q, block_kv)
    tile at a time:

        q block ─┬─ K/V block 0 ─▶ s ─▶ online_softmax_step ─┐
                 ├─ K/V block 1 ─▶ s ─▶ online_softmax_step ─┤  (m, l, acc)
                 └─ K/V block 2 ─▶ s ─▶ online_softmax_step ─┴─▶ o = acc / l

    New here:
        jax.lax.fori_loop(0, n, body, init)   # body(j, carry) -> carry; a loop
                                              # the kernel keeps as a loop
        k_ref[pl.ds(start, size), :]          # rows start .. start + size - 1 of
                                              # a ref; start may be traced
        pl.multiple_of(start, block_kv)       # promises the compiler start is a
                                              # multiple of block_kv (aligned loads)
        jnp.einsum("qh,kh->qk", q, k, preferred_element_type=jnp.float32)
                                              # q k^T: contracts H, no transpose

    The carry is (m, l, acc): start it at -inf, 0, 0 in float32 with shapes
    (block_q, 1), (block_q, 1), (block_q, H). Each step scores s = q k^T * sm_scale
    and calls online_softmax_step. At the end store acc / l as o_ref.dtype.
    """
    raise NotImplementedError


def flash_one_head(q, k, v, *, sm_scale=None, block_q=128, block_kv=128):
    """Single-head attention: q [T, H], k, v [S, H] -> [T, H], one program per q block.

    grid = (T // block_q,): program i computes q block i with one_head_kernel.
    q and o move in (block_q, H) blocks at (i, 0). K and V are passed whole:
    block (S, H) at (0, 0) for every i. Their block index never changes, so the
    pipeline copies them into VMEM once and keeps them there.

        q (T, H)          K, V (S, H), whole                      o (T, H)
        ┌─────────┐                                             ┌─────────┐
        │ block 0 │─ i=0 ─▶ one_head_kernel (loop over K/V) ─▶  │ block 0 │
        │ block 1 │─ i=1 ─▶ one_head_kernel (loop over K/V) ─▶  │ block 1 │
        └─────────┘                                             └─────────┘

    That works while S x H fits in VMEM; the next puzzle lifts the limit.

    Here T is a multiple of block_q and S of block_kv (puzzle 8 handles the rest).
    sm_scale=None means 1 / sqrt(H). Bind the static options into the kernel with
    functools.partial(one_head_kernel, sm_scale=..., block_kv=...).
    """
    raise NotImplementedError


# 4. flash.grid — a (B, N, q, kv) grid with VMEM scratch -------------------------

def flash_kernel(q_ref, k_ref, v_ref, o_ref, m_scratch, l_scratch, acc_scratch, *, sm_scale):
    """One grid step (b, n, i, kv): fold K/V block kv into q block i's running softmax.

    q_ref (block_q, H), k_ref and v_ref (block_kv, H), o_ref (block_q, H): this
    step's blocks. m_scratch, l_scratch (block_q, 1) and acc_scratch (block_q, H):
    float32 VMEM that lives across grid steps.

    In kv_loop the loop over K/V lived inside the kernel, so all of K and V sat
    in VMEM. Make it the grid's last axis instead: each step gets one K/V block,
    and the pipeline fetches the next while this one computes. Any S fits.

    But each grid step is a fresh call of the kernel: the loop carry has nowhere
    to live. Why not in o_ref, the way basics.row_sum accumulated? o_ref has the
    output's dtype (bf16 would round every partial sum) and the output's shape
    (no room for m and l). Scratch buffers are VMEM the kernel owns for the whole
    grid, in any shape and dtype, never copied to HBM.

    Three phases on the kv axis, pl.program_id(3):

        kv == 0      start    m = -inf, l = 0, acc = 0    (scratch starts as garbage)
        every kv     fold     s = q k^T * sm_scale; online_softmax_step on the
                              scratch values; write the new m, l, acc back
        kv == last   finish   o = acc / l                 (last: pl.num_programs(3) - 1)

    Name the phases: @pl.when(kv == 0) def start_q_block(): ...
    """
    raise NotImplementedError


def flash_grid(q, k, v, *, sm_scale=None, block_q=128, block_kv=128):
    """Multi-head attention: q [B, N, T, H], k, v [B, N, S, H] -> [B, N, T, H].

    The grid is (B, N, T // block_q, S // block_kv). For each batch b, head n and
    q block i, the kv axis, last and fastest, walks the K/V blocks:

                      kv → 0       1       2
        (b, n, i = 0)     fold ─▶ fold ─▶ fold, finish ─▶ o block (b, n, 0)
        (b, n, i = 1)     start, fold ─▶ fold ─▶ ...   ─▶ o block (b, n, 1)

    BlockSpecs on 4-D arrays: None in a block shape squeezes that dim away, so
        pl.BlockSpec((None, None, block_q, H), lambda b, n, i, kv: (b, n, i, 0))
    gives the kernel a (block_q, H) ref. q and o follow (b, n, i); K and V follow
    (b, n, kv). o's block index ignores kv, so the block stays in VMEM while kv
    runs and is written back once, after the finish.

    New here:
        scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32), ...]
            # extra kernel arguments, after the outputs, in this order
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"))
            # kv carries state from step to step: "arbitrary" (in order)

    Traffic: q is fetched once per q block, K and V once per q block each:
    T // block_q reads of K and V, never T x S scores. A test counts the bytes.
    T % block_q == 0 and S % block_kv == 0 here; sm_scale=None means 1 / sqrt(H).
    """
    raise NotImplementedError


# 5. flash.causal — skip the blocks above the diagonal, and never fetch them ------

def causal_kernel(q_ref, k_ref, v_ref, o_ref, m_scratch, l_scratch, acc_scratch, *,
                  sm_scale):
    """flash_kernel with a causal mask, skipping the K/V blocks no query here sees.

    Top-left causal: query t sees keys j <= t. Over the grid of (q block, K/V
    block) pairs, with block_q == block_kv:

                kv → 0   1   2   3
        i = 0        ◩   ·   ·   ·        ■ every key visible
        i = 1        ■   ◩   ·   ·        ◩ the diagonal: mask inside the block
        i = 2        ■   ■   ◩   ·        · no key visible: skip the block
        i = 3        ■   ■   ■   ◩

    Blocks above the diagonal hold no visible key, and skipping them halves the
    work. A block is needed when its first key comes at or before its last query:

        kv * block_kv <= (i + 1) * block_q - 1        (i = pl.program_id(2))

    Run the fold under @pl.when(that). Inside, mask by global position:
        row = i * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
        col = kv * block_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where(col <= row, s, MASK_VALUE)
    MASK_VALUE is a huge negative float, not -inf: exp(MASK_VALUE - m) is 0 all
    the same, and a row with no visible key in a block cannot turn into
    -inf - (-inf) = NaN.

    Start and finish stay outside that pl.when: q block 0 skips its last kv
    step, and its output must still be written then.
    """
    raise NotImplementedError


def flash_causal(q, k, v, *, sm_scale=None, block_q=128, block_kv=128):
    """Causal attention, top-left aligned: q [B, N, T, H], k, v [B, N, S, H].

    Skipping the arithmetic is half the saving. The pipeline copies an input
    block from HBM whenever its block index differs from the previous step's; if
    the K/V index maps still ask for block kv on skipped steps, every skipped
    step pays for a copy it never uses.

    So clamp. The last K/V block that q block i needs is
        last = ((i + 1) * block_q - 1) // block_kv
    and the K and V index maps return min(kv, last). On skipped steps the index
    stays at `last`, the block already in VMEM: nothing is copied. The K block
    each step sees, 4 x 4 blocks:

                kv → 0   1   2   3
        i = 0        0   0   0   0        one copy for the whole row
        i = 1        0   1   1   1        (and block 0 carries over from i = 0)
        i = 2        0   1   2   2
        i = 3        0   1   2   3

    An index map receives traced integers, so take the minimum with jnp.minimum
    (Python's min would need their values); // works on them as on ints. Index
    maps longer than a lambda read better as small named functions:
    def kv_index_map(b, n, i, kv): ...

    Grid, q/o BlockSpecs and scratch as in flash_grid. T % block_q == 0 and
    S % block_kv == 0; when T < S, keys past the last query are never fetched.
    """
    raise NotImplementedError


# 6. flash.logsumexp — the forward the backward needs ------------------------------

def flash_fwd_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, m_scratch, l_scratch, acc_scratch,
                     *, sm_scale, causal, kv_len):
    """The complete forward kernel: causal or not, padded keys masked, and lse.

    Refs as in causal_kernel, plus the second output lse_ref (block_q, 1), float32.
    Static options: causal (bool) and kv_len (int, or None).

    Why lse? The backward (puzzle 7) needs each tile's softmax weights
    P = exp(s - lse) again. Storing P means T x S floats, the very matrix flash
    attention avoids; storing lse = log(sum_j exp(s_j)) is one float per query,
    and recovers P exactly. The running state already holds it:

        l = sum_j exp(s_j - m)     so     lse = m + log(l)

    Why kv_len? flash_attention (puzzle 8) pads S up to a multiple of block_kv
    with zero keys. A zero key scores 0, and exp(0 - m) is not 0: padding would
    take weight. Keys at or past kv_len are masked like hidden ones, col < kv_len.
    kv_len=None means there is no padding.

    Python `if causal:` is fine here: causal and kv_len are static Python values,
    known when the kernel is traced (unlike pl.program_id, known only at run time).
    Start from causal_kernel; the skip and the causal mask apply only if causal.
    """
    raise NotImplementedError


def flash_forward(q, k, v, *, causal=False, sm_scale=None, block_q=128, block_kv=128,
                  kv_len=None):
    """Forward attention: o [B, N, T, H] (q's dtype) and lse [B, N, T] (float32).

    q [B, N, T, H]; k, v [B, K, S, H]. For now K == N (puzzle 8 lets several query
    heads share a K/V head). T % block_q == 0, S % block_kv == 0; kv_len (None or
    the number of real keys) is passed to the kernel.

    lse holds one number per query row. Its block must obey the TPU's (8, 128)
    rule too: a (block_q,) block of a [B, N, T] array breaks it. Store lse as a
    [B, N, T, 1] array in (None, None, block_q, 1) blocks: block_q is a multiple
    of 8 and 1 is the whole last dim. Return lse[..., 0]. (JAX's own flash kernel
    broadcasts it to 128 lanes instead: faster stores, 128 times the bytes.)

    Several outputs: out_shape and out_specs become lists, and the kernel gets
    one ref per output, in that order, before the scratch refs.

    K and V index maps as in flash_causal when causal (clamped), else as in
    flash_grid.
    """
    raise NotImplementedError


# 7. flash.backward — dq, dk, dv as kernels, and jax.grad ---------------------------

def flash_dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, dq_scratch,
                    *, sm_scale, causal, kv_len):
    """dQ for one q block, accumulated over the K/V blocks: grid (B, N, q, kv).

    q_ref, do_ref (block_q, H); k_ref, v_ref (block_kv, H); lse_ref, delta_ref
    (block_q, 1) float32; dq_ref (block_q, H); dq_scratch (block_q, H) float32.

    For each K/V block (the math is in flash_backward's docstring):

        s   = q k^T * sm_scale, masked exactly as in the forward (MASK_VALUE)
        p   = exp(s - lse)               the forward's softmax weights, recomputed
        dp  = dO v^T
        ds  = p * (dp - delta)
        dQ += ds k * sm_scale

    Phases as in the forward: zero dq_scratch at kv == 0, accumulate on the blocks
    that are needed (causal: skip those above the diagonal), store at the last kv.
    """
    raise NotImplementedError


def flash_dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref,
                     dk_scratch, dv_scratch, *, sm_scale, causal, kv_len):
    """dK and dV for one K/V block, accumulated over every query that sees it.

    Grid (B, K, S // block_kv, G, T // block_q), G = N // K: program
    (b, h, kv, g, i) adds the contribution of query head h * G + g, q block i, to
    K/V block kv of head h. Until puzzle 8, K == N and G == 1: the g axis has one
    step, and is there so that puzzle 8 needs no new kernel.

    Refs as in flash_dq_kernel, with the outputs dk_ref, dv_ref (block_kv, H) and
    float32 scratch dk_scratch, dv_scratch (block_kv, H). With p and ds as there:

        dV += p^T dO                 jnp.dot(p.astype(do.dtype).T, do, ...)
        dK += ds^T q * sm_scale

    The reduction runs over (g, i): zero the scratch when g == 0 and i == 0; store
    when both are at their last step (pl.num_programs(3) - 1, pl.num_programs(4) - 1).
    Causal: a block pair is needed under the same condition as in the forward,
    kv * block_kv <= (i + 1) * block_q - 1.
    """
    raise NotImplementedError


def flash_backward(q, k, v, o, lse, do, *, causal=False, sm_scale=None, block_q=128,
                   block_kv=128, kv_len=None):
    """The gradients (dq, dk, dv) of o = flash_forward(q, k, v)[0] for the cotangent do.

    Shapes: q, o, do [B, N, T, H]; k, v [B, K, S, H] (K == N until puzzle 8);
    lse [B, N, T]. Returns dq like q, dk like k, dv like v.

    The math, for one query row (c = sm_scale):

        s = q k^T c,   p = softmax(s),   o = p v         (forward)

        dV = p^T dO                                      o is linear in v
        dP = dO v^T                                      ... and in p
        dS = p * (dP - delta),   delta = rowsum(dO * o)  through the softmax
        dQ = dS k c,   dK = dS^T q c                     through s = q k^T c

    Where delta comes from: softmax's Jacobian is dp_j/ds_i = p_j (1[i == j] - p_i),
    so dS_j = p_j (dP_j - sum_i p_i dP_i), and sum_i p_i dP_i = dO . sum_i p_i v_i
    = dO . o. One number per query row: compute it here, once, in plain JAX, as
    delta = sum(do * o, axis=-1) in float32, shaped [B, N, T, 1] like lse.

    Two reductions over two different axes, so two pallas_calls (as in
    basics.outer_relu_grad), each recomputing p = exp(s - lse) instead of storing
    it: the flash trade, more arithmetic for much less memory.

        dQ       grid (B, N, T // block_q, S // block_kv)    reduce over kv
        dK, dV   grid (B, K, S // block_kv, G, T // block_q) reduce over (g, i)

    In the dQ call, q, dO, lse and delta follow (b, n, i) and K, V follow
    (b, n, kv), clamped when causal as in the forward. In the dK/dV call, K, V,
    dK and dV follow (b, h, kv); q, dO, lse and delta follow (b, h * G + g, i).
    Causal: K/V block kv is first seen by q block kv * block_kv // block_q, so
    clamp i from below, i = jnp.maximum(i, first): the skipped steps then fetch
    nothing. When S > T that first block can lie past the last q block (keys no
    query sees), so cap it too: first = jnp.minimum(kv * block_kv // block_q,
    T // block_q - 1).

    Grid axes: the reduction axes come last and are "arbitrary", the others
    "parallel": dimension_semantics ("parallel",) * 3 + ("arbitrary",) for the
    dQ call, ("parallel",) * 3 + ("arbitrary", "arbitrary") for dK/dV.
    """
    raise NotImplementedError


def flash_core(q, k, v, *, causal=False, sm_scale=None, block_q=128, block_kv=128,
               kv_len=None):
    """flash_forward's o, differentiable: jax.grad runs flash_backward.

    JAX does not differentiate a TPU kernel for you, and differentiating the math
    step by step would store every intermediate. jax.custom_vjp tells jax.grad
    what to do instead:

        @jax.custom_vjp
        def attend(q, k, v):                  # the function jax.grad sees
            ...                               # -> o
        def attend_forward(q, k, v):          # -> (o, residuals kept for later)
            ...
        def attend_backward(residuals, do):   # -> (dq, dk, dv): one per input
            ...
        attend.defvjp(attend_forward, attend_backward)
        return attend(q, k, v)

    Keep (q, k, v, o, lse) as residuals: the backward recomputes the rest. The
    static options (causal, sm_scale, block sizes, kv_len) are plain Python
    values: leave them out of attend's arguments and let the three functions
    read them from flash_core's scope.
    """
    raise NotImplementedError


# 8. flash.gqa — grouped-query attention, and the public API ------------------------

def flash_attention(q, k, v, *, causal=False, sm_scale=None, block_q=128, block_kv=128):
    """Flash attention, the chapter's public API: your pieces, for any shapes.

    q [B, N, T, H]; k, v [B, K, S, H] with K dividing N; any T, S >= 1; float32
    or bfloat16 in, the same dtype out; causal top-left; sm_scale=None means
    1 / sqrt(H); differentiable, with your Pallas kernels forward and backward.

    Grouped-query attention (GQA). Many models keep fewer K/V heads than query
    heads, K < N, which makes the K/V cache N / K times smaller. The G = N // K
    query heads of a group share one K/V head, consecutive heads together:

        query head n   0  1  2  3  4  5  6  7        N = 8, K = 2, G = 4
        K/V head       0  0  0  0  1  1  1  1        n // G

    Only the index maps change. Not one line of any kernel: a kernel never knew
    which head its blocks came from.
      * flash_forward, and the dQ call of flash_backward: the K and V index maps
        return head n // G where they returned n.
      * the dK/dV call: its grid (B, K, S // block_kv, G, T // block_q) already
        has the group axis g; the q, dO, lse and delta index maps return query
        head h * G + g. dK and dV then sum over the group's G heads by
        themselves, because the scratch accumulates across g as well as i.
    Go back to flash_forward and flash_backward for that (with K == N, G == 1,
    and puzzles 6 and 7 keep passing).

    Then this function, the glue of a real API:
      1. Check the arguments up front; raise ValueError naming the argument and
         what was expected: 4-D shapes, k and v alike, B and H as in q,
         N % K == 0, one floating dtype, block sizes positive multiples of 8.
      2. sm_scale = 1 / sqrt(H) when None.
      3. Whole blocks only: shrink a block longer than its sequence,
         block_q = min(block_q, T rounded up to a multiple of 8) (block_kv with S
         likewise), then pad T and S with zeros (jnp.pad) up to multiples of the
         blocks. Padded keys are masked: pass kv_len=S when S was padded. Padded
         queries are cut off the output, so their gradient is zero.
      4. o = flash_core(...) on the padded arrays; return o[:, :, :T]. jnp.pad
         and slicing differentiate themselves: jax.grad just works.
    """
    raise NotImplementedError
