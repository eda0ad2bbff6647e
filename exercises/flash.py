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

    K may be smaller than N (grouped-query attention, puzzle 8): the G = N // K
    query heads of a group share one K/V head, consecutive heads together:

        query head   0  1  2  3  4  5        N = 6, K = 2, G = 3
        K/V head     0  0  0  1  1  1

    Give every query head its K/V head before the einsum. jnp.repeat and
    jnp.tile both copy along an axis, but in different orders (each entry r
    times in place, or the whole axis r times): only one of them gives the
    layout above.

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

    So one step: find the new max, rescale what l and acc hold so far, then
    add this chunk's terms, taken against the new max. Reductions run over
    the chunk's keys, the last axis; keep that axis (keepdims=True) so that m
    and l stay [R, 1] and broadcast against s.

    For the weighted sum of values, a TPU's matrix unit multiplies inputs in
    v's dtype (bfloat16 in the later kernels) and can hand back float32 sums:
    give jnp.dot operands of v's dtype and ask for preferred_element_type=
    jnp.float32.

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
        jnp.einsum(subscripts, x, y, preferred_element_type=jnp.float32)
                                              # one letter per dim; a letter left
                                              # out of the output is summed over:
                                              # contracting H of q and of k gives
                                              # q k^T with no transpose

    The loop carry is online_attention's running state, for this q block's rows:
    the same starting values, in float32. Each iteration scores one K/V block
    against the queries (scaled by sm_scale) and folds it in with
    online_softmax_step. After the loop, normalise and store in o_ref's dtype.
    """
    raise NotImplementedError


def flash_one_head(q, k, v, *, sm_scale=None, block_q=128, block_kv=128):
    """Single-head attention: q [T, H], k, v [S, H] -> [T, H], one program per q block.

    A 1-D grid, one program per q block: program i computes q block i with
    one_head_kernel. q and o move in (block_q, H) blocks, one per program. K and
    V are passed whole: a single (S, H) block, the same for every program.
    Since their block index never changes, the pipeline copies them into VMEM
    once and keeps them there.

        q (T, H)          K, V (S, H), whole                      o (T, H)
        ┌─────────┐                                             ┌─────────┐
        │ block 0 │─ i=0 ─▶ one_head_kernel (loop over K/V) ─▶  │ block 0 │
        │ block 1 │─ i=1 ─▶ one_head_kernel (loop over K/V) ─▶  │ block 1 │
        └─────────┘                                             └─────────┘

    That works while S x H fits in VMEM; the next puzzle lifts the limit.

    Here T is a multiple of block_q and S of block_kv (puzzle 8 handles the rest).
    sm_scale=None means 1 / sqrt(H). The kernel's keyword options are static
    Python values: bind them into it with functools.partial.
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

    Three phases along the kv axis, grid axis 3:

        first kv step   start    the running state's starting values
                                 (scratch starts as garbage)
        every kv step   fold     score this K/V block; online_softmax_step on
                                 the scratch values; write the new m, l, acc back
        last kv step    finish   normalise, store o in o_ref's dtype

    The phases that do not run at every step are @pl.when blocks, as in
    matmul.k_accumulate (pl.program_id, pl.num_programs). Name them after
    what they do (start_q_block, finish_q_block): the kernel reads as the table.
    """
    raise NotImplementedError


def flash_grid(q, k, v, *, sm_scale=None, block_q=128, block_kv=128):
    """Multi-head attention: q [B, N, T, H], k, v [B, N, S, H] -> [B, N, T, H].

    The grid is (B, N, T // block_q, S // block_kv). For each batch b, head n and
    q block i, the kv axis, last and fastest, walks the K/V blocks:

                     kv → 0              1       2
        (b, n, i = 0)     start, fold ─▶ fold ─▶ fold, finish ─▶ o block (b, n, 0)
        (b, n, i = 1)     start, fold ─▶ fold ─▶ fold, finish ─▶ o block (b, n, 1)

    BlockSpecs on 4-D arrays: None in a block shape squeezes that dim away
    (matmul.batched), so a (None, None, rows, H) block reaches the kernel as a
    (rows, H) ref, while its index map still returns four block indices, one
    per array dim. Ask of each array which grid indices pick its block: q and
    o depend on the batch, the head and the q block, never on kv; K and V on
    the batch, the head and the kv block. Because o's block index ignores kv,
    the block stays in VMEM while kv runs and is written back once, after the
    finish.

    New here (met in matmul, now with several buffers):
        scratch_shapes=[pltpu.VMEM(shape, dtype), ...]
            # one buffer per entry, passed to the kernel after the outputs,
            # in list order: m, l, acc, with the shapes flash_kernel expects
        compiler_params=pltpu.CompilerParams(dimension_semantics=(...))
            # one string per grid axis: "parallel" for independent steps,
            # "arbitrary" for an axis whose steps carry state to the next

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
    work. When is a block needed? Compare two positions in the sequence: the
    first key of the K/V block and the last query of the q block (the grid
    gives block indices; the block sizes turn them into positions, and
    block_q need not equal block_kv). Run the fold under a pl.when of that test.

    Inside the blocks you keep, the diagonal ones need a mask at the level of
    single scores: give each score of the (block_q, block_kv) tile its query
    position and its key position in the whole sequence, from the grid
    indices, the block sizes (q_ref.shape, k_ref.shape) and
    jax.lax.broadcasted_iota, as basics.tail did for rows; then hide the keys
    a query must not see with jnp.where.

    Hide them with MASK_VALUE, a huge negative float, not -inf: exp(MASK_VALUE - m)
    is 0 all the same, and a row with no visible key in a block cannot turn
    into -inf - (-inf) = NaN.

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

    So clamp. On the steps a q block skips, make the K and V index maps keep
    naming the last K/V block this q block needs (the one that holds its last
    query's position): the index does not change, that block is already in
    VMEM, and nothing is copied. The K block each step sees, 4 x 4 blocks,
    block_q == block_kv:

                kv → 0   1   2   3
        i = 0        0   0   0   0        one copy for the whole row
        i = 1        0   1   1   1        (and block 0 carries over from i = 0)
        i = 2        0   1   2   2
        i = 3        0   1   2   3

    An index map receives traced integers: clamp them with jnp.minimum or
    jnp.maximum (Python's min and max would need their values); +, * and //
    work on them as on ints. Index maps longer than a lambda read better as
    small named functions: def kv_index_map(b, n, i, kv): ...

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

    Why lse? The backward (puzzle 7) needs each tile's softmax weights P
    again. Storing P means T x S floats, the very matrix flash attention
    avoids; storing lse = log(sum_j exp(s_j)), the log of the softmax's
    denominator, is one float per query and recovers P exactly from a tile's
    scores. The running state already holds lse, in two pieces: m, and
    l = sum_j exp(s_j - m). Rewrite log(sum_j exp(s_j)) in terms of them.

    Why kv_len? flash_attention (puzzle 8) pads S up to a multiple of block_kv
    with zero keys. A zero key scores 0, and exp(0 - m) is not 0: padding would
    take weight. Keys at or past position kv_len are padding: hide them in the
    same jnp.where as hidden keys, causal or not (two boolean masks combine
    with jnp.logical_and). kv_len=None means there is no padding.

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
    rule too: a (block_q,) block of a [B, N, T] array breaks it. So the kernel
    writes lse as a [B, N, T, 1] array, whose blocks squeeze B and N and keep
    (block_q, 1): block_q is a multiple of 8 and 1 is the whole last dim. Those
    rows belong to the q block, like o's. Drop the trailing dim before
    returning. (JAX's own flash kernel broadcasts lse to 128 lanes instead:
    faster stores, 128 times the bytes.)

    Several outputs: out_shape and out_specs become lists, and the kernel gets
    one ref per output, in that order, before the scratch refs.

    K and V index maps as in flash_causal when causal (clamped), else as in
    flash_grid: `causal` is a Python bool, so an index map may branch on it.
    """
    raise NotImplementedError


# 7. flash.backward — dq, dk, dv as kernels, and jax.grad ---------------------------

def flash_dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, dq_scratch,
                    *, sm_scale, causal, kv_len):
    """dQ for one q block, accumulated over the K/V blocks: grid (B, N, q, kv).

    q_ref, do_ref (block_q, H); k_ref, v_ref (block_kv, H); lse_ref, delta_ref
    (block_q, 1) float32; dq_ref (block_q, H); dq_scratch (block_q, H) float32.

    For each K/V block, follow the math of flash_backward's docstring: recompute
    this tile's scores exactly as the forward did (scaled, and masked the same
    way, with MASK_VALUE), turn them back into the forward's softmax weights
    with lse (no running max or sum needed: lse already normalises), then walk
    the chain rule down to this block's share of dQ. delta arrives ready-made.
    Products go through the MXU as in the forward: operands in the inputs'
    dtype, float32 results.

    Phases as in the forward: start the float32 accumulator before the first kv
    step, add on the blocks that are needed (causal: the forward's skip), store
    in dq's dtype after the last kv step.
    """
    raise NotImplementedError


def flash_dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref,
                     dk_scratch, dv_scratch, *, sm_scale, causal, kv_len):
    """dK and dV for one K/V block, accumulated over every query that sees it.

    Grid (B, K, S // block_kv, G, T // block_q), G = N // K: program
    (b, h, kv, g, i) adds the contribution of q block i of the g-th query head
    in K/V head h's group to K/V block kv of head h. Until puzzle 8, K == N and
    G == 1: the g axis has one step, and is there so that puzzle 8 needs no new
    kernel.

    Refs as in flash_dq_kernel, with the outputs dk_ref, dv_ref (block_kv, H) and
    float32 scratch dk_scratch, dv_scratch (block_kv, H). The same p and ds as
    there, now summed the other way, over queries: flash_backward's dV and dK
    lines, for this K/V block. A tile's transpose is .T.

    The reduction runs over two grid axes, g and i: start the accumulators
    before the first step of both, store after the last step of both. A
    pl.when condition is a traced bool, so combine two of them with &
    (Python's `and` would need their values), each comparison in parentheses.
    Causal: the same (q block, K/V block) pairs are skipped as in the forward.
    """
    raise NotImplementedError


def flash_backward(q, k, v, o, lse, do, *, causal=False, sm_scale=None, block_q=128,
                   block_kv=128, kv_len=None):
    """The gradients (dq, dk, dv) of o = flash_forward(q, k, v)[0] for the cotangent do.

    Shapes: q, o, do [B, N, T, H]; k, v [B, K, S, H] (K == N until puzzle 8);
    lse [B, N, T] float32, as flash_forward returns it. Returns dq like q, dk
    like k, dv like v.

    The math, for one query row (c = sm_scale):

        s = q k^T c,   p = softmax(s),   o = p v         (forward)

        dV = p^T dO                                      o is linear in v
        dP = dO v^T                                      ... and in p
        dS = p * (dP - delta),   delta = rowsum(dO * o)  through the softmax
        dQ = dS k c,   dK = dS^T q c                     through s = q k^T c

    Where delta comes from: softmax's Jacobian is dp_j/ds_i = p_j (1[i == j] - p_i),
    so dS_j = p_j (dP_j - sum_i p_i dP_i), and sum_i p_i dP_i = dO . sum_i p_i v_i
    = dO . o. One number per query row: compute it here, once, in plain JAX and
    in float32, before the kernels.

    Per-row values travel as the forward's lse did inside flash_forward: the
    kernels read lse_ref and delta_ref as (block_q, 1) blocks of [B, N, T, 1]
    arrays (the TPU's (8, 128) rule again). lse arrives as [B, N, T]: reshape
    it to [B, N, T, 1] before the calls, and build delta as [B, N, T, 1] too.

    Two reductions over two different axes, so two pallas_calls (as in
    basics.outer_relu_grad), each recomputing p from the scores and lse instead
    of storing it: the flash trade, more arithmetic for much less memory.

        dQ       grid (B, N, T // block_q, S // block_kv)    reduce over kv
        dK, dV   grid (B, K, S // block_kv, G, T // block_q) reduce over (g, i)

    Index maps. In the dQ call, everything per query (q, dO, lse, delta, dQ)
    goes with the q block and K, V with the kv block, exactly as in
    flash_forward, clamp included when causal. In the dK/dV call the roles
    swap: K, V, dK and dV go with the kv block of K/V head h, and q, dO, lse
    and delta with q block i of the query head that is member g of head h's
    group (with G == 1, head h itself).

    Causal, dK/dV call: for K/V block kv the early q blocks, those before the
    first one that can see its first key, are skipped. Mirror the forward's
    trick from the other side: on those steps keep the q-side index maps
    naming that first needed q block (a clamp from below), so nothing is
    fetched. Careful when S > T: for keys past the last query, that first q
    block would lie past the end of q, and an index map must always name a
    real block.

    Grid axes: the reduction axes come last and are "arbitrary", the others
    "parallel".
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
        K/V head       0  0  0  0  1  1  1  1

    Only the index maps change. Not one line of any kernel: a kernel never knew
    which head its blocks came from.
      * flash_forward, and the dQ call of flash_backward: the K and V index maps
        must name the K/V head that query head n reads (the table above), no
        longer n itself.
      * the dK/dV call: its grid (B, K, S // block_kv, G, T // block_q) already
        has the group axis g; the q, dO, lse and delta index maps must name the
        query head that is member g of K/V head h's group. dK and dV then sum
        over the group's G heads by themselves, because the scratch
        accumulates across g as well as i.
    Go back to flash_forward and flash_backward for that (with K == N, G == 1,
    and puzzles 6 and 7 keep passing).

    Then this function, the glue of a real API:
      1. Check the arguments up front; raise ValueError naming the argument and
         what was expected: 4-D shapes, k and v alike, B and H as in q,
         N % K == 0, one floating dtype, block sizes positive multiples of 8.
      2. sm_scale = 1 / sqrt(H) when None.
      3. Whole blocks only. A block longer than its sequence shrinks to the
         sequence length rounded up to a multiple of 8 (the sublane rule); then
         T and S are padded with zeros (jnp.pad) up to multiples of the blocks.
         Padded keys must take no weight: whenever S was padded, tell the
         kernels how many keys are real (kv_len). Padded queries are cut off
         the output, so their gradient is zero.
      4. Run flash_core on the padded arrays and cut o back to the T real
         queries. jnp.pad and slicing differentiate themselves: jax.grad just
         works.
    """
    raise NotImplementedError
