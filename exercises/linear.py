"""Linear attention: a state carried across chunks, gating, the delta rule.

Run `pytest exercises/test_linear.py` after every edit; add `-k <puzzle>` for
one puzzle and `--hint` when stuck. Replace each `raise NotImplementedError`
with your code; keep the signatures.

The mental model of this chapter
--------------------------------
Softmax attention compares every query with every key: T^2 scores per head, and
a K/V cache that grows with the sequence. Drop the softmax, and the sum regroups:

    o_t = sum_{j<=t} (q_t . k_j) v_j  =  q_t (sum_{j<=t} k_j^T v_j)  =  q_t S_t

S_t, an [H, Hv] matrix, is a state: the sum of the outer products k_j^T v_j of
every token so far (row vectors: k_j^T v_j is a column times a row). Its size does
not grow with t, and each token changes it by one rank-one term:

    linear       S_t = S_{t-1} + k_t^T v_t                               o_t = q_t S_t
    gated        S_t = g_t S_{t-1} + k_t^T v_t,   g_t = exp(log_decay_t)
    delta rule   S_t = S_{t-1} + beta_t k_t^T (v_t - k_t S_{t-1})
    gated delta  S_t = g_t S_{t-1} + beta_t k_t^T (v_t - g_t k_t S_{t-1})

Gating (RetNet, GLA, Mamba-2) lets old memories fade: g_t in (0, 1]. The delta
rule (DeltaNet) writes not v_t but the error of what the state already predicts
for the key k_t, k_t S_{t-1}, with a strength beta_t in [0, 1]: it overwrites,
where plain linear attention only piles up. Gated DeltaNet (Qwen3-Next) does both.

Token by token, that is T rank-one updates in a row: nothing for the MXU to chew
on, and every step waits for the one before. The kernels of this chapter cut the
sequence into chunks of C tokens, compute everything inside a chunk with matmuls,
and carry S from one chunk to the next in VMEM:

             chunk 0              chunk 1              chunk 2
         ┌──────────────┐     ┌──────────────┐     ┌──────────────┐
         │ q, k, v  [C] │     │ q, k, v  [C] │     │ q, k, v  [C] │
         │  o = inside  │     │  o = inside  │     │  o = inside  │
         │    + q S     │     │    + q S     │     │    + q S     │
         └──────┬───────┘     └──────┬───────┘     └──────┬───────┘
    S = 0 ──────┴─▶ S += K^T V ──────┴─▶ S += K^T V ──────┴─▶ ...

Per head that is T / C chunks of C^2 (H + Hv) + C H Hv work: O(T C), not O(T^2),
and HBM sees q, k, v and o once each; the state never leaves VMEM. First the
truth, token by token (puzzle 1); one chunk as matmuls (2); the state carried
across chunks (3); gating (4); the delta rule's chunk form, a triangular system
(5); both at once (6); and the public API (7): `linear_attention`,
`gated_linear_attention`, `delta_rule` and `gated_delta_rule`, for any T.

Dimension letters: B batch, N heads, T tokens, H the head dim of q and k, Hv the
head dim of v (it may differ from H), C the chunk length (`chunk`). The state S is
[H, Hv] per batch and head, float32 whatever the inputs' dtype. No normalisation,
no feature map, no scale here: the caller does those (the delta rule's callers
L2-normalise k, and so do the tests). log_decay <= 0 and 0 <= beta <= 1.
The tests run your kernels on CPU in Pallas's TPU interpret mode, which fills fresh
buffers (outputs and scratch) with NaN, so a missing initialisation shows.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


# 1. linear.recurrent — the recurrent form in plain JAX ----------------------

def recurrent(q, k, v, log_decay=None, beta=None):
    """The chapter's ground truth: the recurrence, one token at a time, in plain JAX.

    q, k [B, N, T, H]; v [B, N, T, Hv]; log_decay, beta [B, N, T] or None.
    Returns o [B, N, T, Hv] in q's dtype. One function for all four models:

        log_decay  beta
        None       None    S_t = S_{t-1} + k_t^T v_t                      linear
        given      None    S_t = g_t S_{t-1} + k_t^T v_t                  gated
        None       given   S_t = S_{t-1} + beta_t k_t^T (v_t - k_t S_{t-1})  delta rule
        given      given   S_t = g_t S_{t-1} + beta_t k_t^T (v_t - g_t k_t S_{t-1})

    and o_t = q_t S_t, S_t including token t itself. With g_t = exp(log_decay_t)
    (1 when there is no gating) every line is the same three moves: decay the old
    state, g_t S_{t-1}; work out what to write for key k_t (v_t itself, or beta_t
    times the error of the decayed state's prediction k_t (g_t S_{t-1})); add the
    outer product of k_t and that write. Then read q_t S_t.

    New here:
        jax.lax.scan(step, init, xs)   # step(carry, x) -> (carry, y): runs step once
                                       # per slice x of xs along axis 0 (xs may be a
                                       # tuple of arrays, and None stays None), and
                                       # returns the last carry and the ys stacked
                                       # along a new axis 0
        jnp.moveaxis(x, source, dest)  # the time axis to the front, and back

    The carry is the state of every batch and head at once, [B, N, H, Hv] float32,
    zeros at t = 0. Compute in float32 and cast the output to q's dtype at the end.

    Why it is slow: T steps, each a handful of [B, N, H, Hv] elementwise ops that
    wait for the step before. On a TPU the MXU sits idle (a rank-one update is not
    a matmul) and the state makes a trip through memory at every token. The rest of
    the chapter computes the same numbers with matmuls, chunk by chunk.
    """
    raise NotImplementedError


# 2. linear.intra — one chunk as matmuls ---------------------------------------

def intra_chunk_kernel(q_ref, k_ref, v_ref, o_ref):
    """One chunk of one sequence on its own (the state zero at its start), by matmuls.

    q_ref, k_ref (C, H); v_ref, o_ref (C, Hv).

    With S = 0 at the chunk's start, S_i = sum_{j<=i} k_j^T v_j inside the chunk, and

        o_i = q_i S_i = sum_{j<=i} (q_i . k_j) v_j

    a weighted sum of the chunk's values: weight q_i . k_j for keys j <= i, and 0 for
    the keys after i. All C x C weights at once are one matmul (q against k over H,
    as flash's scores), then a mask, then a second matmul with v:

                key j →  0    1    2    3
        query i = 0   [ s00   0    0    0  ]     s_ij = q_i . k_j
                  1   [ s10  s11   0    0  ]     zero where j > i: the future
                  2   [ s20  s21  s22   0  ]
                  3   [ s30  s31  s32  s33 ]     o = s @ v

    The diagonal stays (S_i includes token i), and the masked entries become 0, not
    -inf: there is no softmax here, only a sum.

    Positions come from jax.lax.broadcasted_iota (as in basics.tail and
    flash.causal): an int32 array of the scores' shape counting along one dim.
    The scores are float32 (preferred_element_type=jnp.float32); hand the second
    matmul operands of v's dtype (the MXU multiplies bf16 natively) and ask for
    float32 sums. Store in o_ref's dtype.
    """
    raise NotImplementedError


def intra_chunk(q, k, v, *, chunk=64):
    """Every chunk of every sequence on its own: q, k [B, N, T, H], v [B, N, T, Hv].

    Returns [B, N, T, Hv] in q's dtype, each chunk computed as if the state were zero
    at its start (puzzle 3 adds what the earlier chunks leave behind). T % chunk == 0.

    A grid of (B, N, T // chunk) steps, one per chunk of one sequence:

        q [B, N, T, H]                     o [B, N, T, Hv]
        (b, n): ┌─────┬─────┬─────┐        ┌─────┬─────┬─────┐
                │ c=0 │ c=1 │ c=2 │  ─▶    │ c=0 │ c=1 │ c=2 │
                └─────┴─────┴─────┘        └─────┴─────┴─────┘

    Each array moves in blocks of one chunk's rows with its whole last dim, B and N
    squeezed away with None (flash.grid): the kernel sees (C, H) and (C, Hv) refs,
    and each index map names the block (b, n, c, 0). The chunks do not talk to each
    other (yet), so every axis is "parallel". out_shape: v's shape, q's dtype.
    """
    raise NotImplementedError


# 3. linear.chunked — the state carried across a sequential chunk axis ---------

def linear_kernel(q_ref, k_ref, v_ref, o_ref, state_ref):
    """One chunk of linear attention: intra_chunk's part plus what the past left in S.

    q_ref, k_ref (C, H); v_ref, o_ref (C, Hv); state_ref (H, Hv) float32 VMEM scratch
    that lives across grid steps.

    Let S be the state before this chunk: the sum of k^T v over every earlier token
    of this sequence. Inside the chunk S_i = S + (the chunk's own terms up to i), so

        o_i = q_i S  +  sum_{j<=i, j in the chunk} (q_i . k_j) v_j
              └ the past ┘   └ intra_chunk_kernel's causal part ┘

    and after the chunk, S for the next one is S + K^T V: the chunk's C outer products
    in one matmul, contracting the chunk's rows ("ih,iv->hv" in an einsum).

    The order matters. Read the output from S as it was before this chunk; only then
    add the chunk to S. (Add it first and every key of the chunk counts twice, the
    future included.) And S must start at zero for every sequence: the chunk axis
    runs in order for one (b, n), then the next (b, n) starts at chunk 0.

        step (b, n, c):   c == 0: S = 0  │  o = inside + q S  │  S = S + K^T V

    Precision. S holds a sum over the whole sequence, and its low bits are what the
    latest chunks added: keep it float32 in the scratch, and keep products that read
    it in float32 too: cast q up (q.astype(jnp.float32)), never S down. The products
    of two input blocks (q k^T, K^T V) take the inputs' dtype and give float32 sums.
    """
    raise NotImplementedError


def chunked_call(q, k, v, *per_token, kernel, chunk=64):
    """Run `kernel` over every chunk, in order: q, k [B, N, T, H], v [B, N, T, Hv].

    per_token: zero, one or two [B, N, T] arrays (log_decay, beta: puzzles 4 to 6),
    handed to the kernel after q, k, v, one (C, 1) ref each. Returns [B, N, T, Hv] in
    q's dtype. T % chunk == 0. This one call serves every kernel of the chapter:
    linear_kernel here, gated_kernel, delta_kernel and gated_delta_kernel later.

    It is intra_chunk's call with three changes:
      * the state: one VMEM scratch buffer, (H, Hv) float32, passed to the kernel
        after the output (scratch_shapes, as in flash.grid);
      * the chunk axis, the grid's last, carries the state from chunk c to c + 1:
        its dimension_semantics is "arbitrary". A TPU with two cores splits a
        "parallel" axis between them, and the second core would start its half of
        the chunks from an empty state. B and N stay "parallel";
      * the per-token arrays. A (C,) block of a [B, N, T] array breaks the TPU's
        (8, 128) rule (its last dim is neither 128 wide nor the whole T), so each
        travels as a [B, N, T, 1] array (a reshape, free) in (C, 1) blocks, like
        flash's lse: rows of the chunk, one column.

    Index maps as in intra_chunk, for every array: block (b, n, c, 0).
    """
    raise NotImplementedError


# 4. linear.gating — decay inside a chunk, in log space ------------------------

def decay_factors(log_decay):
    """Every decay one chunk needs, from its log decays log_decay (C, 1), float32.

    Returns (within (C, C), since_start (C, 1), until_end (C, 1), across (1, 1)).

    Unroll S_t = g_t S_{t-1} + k_t^T v_t across a chunk. Let b_i be the chunk's
    cumulative log decay, b_i = log_decay_0 + ... + log_decay_i (tokens of this
    chunk only). Then token i's state is

        S_i = exp(b_i) S  +  sum_{j<=i} exp(b_i - b_j) k_j^T v_j

    Each term is a product of the g_t between a write and a read, and four of them
    are all a chunk needs:

        within[i, j]   exp(b_i - b_j) for j <= i, 0 above      token j's write, seen at i
        since_start[i] exp(b_i)                                the state S, seen at row i
        until_end[j]   exp(b_last - b_j)                       token j's write, at the end
        across         exp(b_last)                             S, across the whole chunk

    within is a decay mask: the causal mask of puzzle 2 with decays instead of ones.

    Two TPU facts shape the code.

    No cumsum. jnp.cumsum has no lowering for TPU kernels, but a cumulative sum is a
    masked sum over a triangle. On a (C, C) grid of iotas, put log_decay_s in every
    column j whose s <= j (log_decay is a (C, 1) column, so it broadcasts along each
    row) and sum down the rows: column j holds b_j. That gives b as a (1, C) row.
    The (C, 1) column form comes the same way from the row: keep the diagonal (the
    entry where row == col) and sum across each row.

        log_decay_s ─▶   s\\j   0    1    2             b as a row (1, C):
                         0   [ a0   a0   a0 ]
                         1   [  .   a1   a1 ]     sum down ─▶  [ b0  b1  b2 ]
                         2   [  .    .   a2 ]

    Log space. With strong decay (log_decay near -5, C = 64) b_last reaches -300:
    exp(b_i) underflows to 0 and exp(-b_j) overflows to inf, so exp(b_i) * exp(-b_j)
    is 0 * inf = NaN even where the true factor is 1. Take every factor as one exp of
    a difference of logs. For within, the exponent b_i - b_j is positive above the
    diagonal (and may overflow there): put -inf there first (jnp.where), then exp:
    exp(-inf) is 0, and the mask comes for free. The other three never overflow.
    (Masking after the exp, exp(b_i - b_j) times a 0/1 mask, passes on a CPU, where
    XLA turns the product into a select; on a TPU inf * 0 is NaN. The tests evaluate
    this function one operation at a time and read your kernels' programs for it.)

    Plain JAX on values, no refs: gated_kernel and gated_delta_kernel call it. It has a
    test of its own (pytest exercises/test_linear.py -k decay_factors).
    """
    raise NotImplementedError


def gated_kernel(q_ref, k_ref, v_ref, log_decay_ref, o_ref, state_ref):
    """One chunk of gated linear attention: linear_kernel with the decays multiplied in.

    Refs as in linear_kernel, plus log_decay_ref (C, 1), this chunk's log decays.

    With the four factors of decay_factors:

        o_i   = since_start_i (q_i S)  +  sum_{j<=i} within_ij (q_i . k_j) v_j
        S_new = across S  +  sum_j until_end_j k_j^T v_j

    The first line: the masked scores of linear_kernel, multiplied by within (which
    is the mask too), and q S scaled row by row by since_start. The second: the rows
    of k scaled by until_end before the K^T V matmul, and the old state scaled by
    across. The order, the start of each sequence and the float32 state are those of
    linear_kernel; the decays are float32 as well.

    Called through chunked_call(q, k, v, log_decay, kernel=gated_kernel, chunk=C).
    """
    raise NotImplementedError


# 5. linear.delta_rule — the triangular system inside a chunk -----------------------

def forward_substitution(lower, rhs):
    """u (C, W) such that (I + lower) u = rhs, for lower (C, C) strictly lower-triangular.

    rhs (C, W) float32. Row by row, the system says

        u_i + sum_{j<i} lower_ij u_j = rhs_i      so      u_i = rhs_i - lower_i @ u

    where lower_i is row i of lower, zero from column i on: it reads only rows of u
    that come before i. Solve the rows in order, 0, 1, ..., C - 1 (forward
    substitution), each from the rows already solved:

        u_0 = rhs_0
        u_1 = rhs_1 - lower_10 u_0
        u_2 = rhs_2 - lower_20 u_0 - lower_21 u_1      ...

    On a TPU, a kernel cannot index a value with a traced row number. Loop over i
    with jax.lax.fori_loop (as in flash.kv_loop), carrying all of u, and work with
    masks instead of indices:
      * row i of lower, as a (1, C) row: keep the entries of row i (an iota over
        lower's rows equal to i) and sum down the rows;
      * that row @ u: one (1, C) @ (C, W) jnp.dot, in float32;
      * only row i of u changes: jnp.where on a (C, 1) iota equal to i.
    Start the carry from rhs (every row defined; rows after i are replaced when their
    turn comes).

    Plain JAX on values: delta_kernel and gated_delta_kernel call it. It has a test of
    its own (pytest exercises/test_linear.py -k forward_substitution).
    """
    raise NotImplementedError


def delta_kernel(q_ref, k_ref, v_ref, beta_ref, o_ref, state_ref):
    """One chunk of the delta rule: solve for what each row writes, then linear attention.

    Refs as in linear_kernel, plus beta_ref (C, 1), this chunk's beta.

    S_t = S_{t-1} + k_t^T u_t, with u_t = beta_t (v_t - k_t S_{t-1}) what token t
    writes. Inside the chunk, S_{i-1} is S (the state before the chunk) plus the writes
    of the rows before i, sum_{j<i} k_j^T u_j. So

        u_i = beta_i (v_i - k_i S)  -  beta_i sum_{j<i} (k_i . k_j) u_j

    For the whole chunk that is a triangular system:

        (I + L) u = beta (V - K S),      L_ij = beta_i (k_i . k_j)   for j < i, else 0

    (production kernels write the inverse of I + L, the "UT transform", because it
    does not depend on S; here the chunks run in order anyway, and solving against
    the right-hand side with forward_substitution is the same arithmetic.) beta is a
    (C, 1) column: beta * x scales row i of x by beta_i.

    Once u is known, the chunk is linear attention with the values u:

        o   = (causal scores) @ u  +  q S
        S_new = S + K^T u

    Everything about the state is as in linear_kernel: zero at each sequence's first
    chunk, read before the update, float32 (K S too: cast k up). The solve runs in
    float32; the matmuls that take u may round it to the inputs' dtype.

    Called through chunked_call(q, k, v, beta, kernel=delta_kernel, chunk=C).
    """
    raise NotImplementedError


# 6. linear.gated_delta — the delta rule with the decay of puzzle 4 -----------------

def gated_delta_kernel(q_ref, k_ref, v_ref, beta_ref, log_decay_ref, o_ref, state_ref):
    """One chunk of the gated delta rule: puzzles 4 and 5 together.

    Refs as in delta_kernel, then log_decay_ref (C, 1) (the order of
    gated_delta_rule's arguments: beta before log_decay).

    S_t = g_t S_{t-1} + k_t^T u_t with u_t = beta_t (v_t - g_t k_t S_{t-1}). Inside the
    chunk, the state row i erases from is g_i S_{i-1}: S decayed by exp(b_i), plus
    every earlier write u_j decayed by exp(b_i - b_j). So

        u_i = beta_i (v_i - exp(b_i) k_i S) - beta_i sum_{j<i} exp(b_i - b_j) (k_i . k_j) u_j

        (I + L) u = beta (V - since_start * (K S)),   L_ij = beta_i (k_i . k_j) within_ij,  j < i

    The decay factors are decay_factors'; the solve is forward_substitution. Then the
    chunk is gated linear attention (gated_kernel) with the values u.

    Called through chunked_call(q, k, v, beta, log_decay, kernel=gated_delta_kernel,
    chunk=C).
    """
    raise NotImplementedError


# 7. linear.api — any T, validated arguments, the four public functions ----------

def chunked_attention(q, k, v, *, log_decay=None, beta=None, chunk=64):
    """The chapter's public API in one function: the right kernel for any T.

    q, k [B, N, T, H]; v [B, N, T, Hv]; log_decay, beta [B, N, T] or None (log_decay
    turns on gating, beta the delta rule); chunk a positive multiple of 8. Any T >= 1;
    float32 or bfloat16 in, the same dtype out. The four public functions below are
    this function with their gates (provided).

      1. Check the arguments up front, in plain Python, and raise ValueError with a
         message that names the argument and says what was expected: q 4-D; k of
         q's shape; v 4-D with q's B, N and T; log_decay and beta [B, N, T] when given;
         q, k, v of one floating dtype; chunk a positive multiple of 8.
      2. Whole chunks. A chunk longer than the sequence shrinks to T rounded up to a
         multiple of 8 (a block keeps whole sublanes); then T is padded with zeros
         (jnp.pad) up to a multiple of the chunk. The padding goes at the end, after
         every real token: nothing flows backwards in time, so no real output ever
         sees it, whatever the model (no mask needed, unlike flash's padded keys).

             T = 50, chunk = 16:   [ 16 | 16 | 16 | 2 + 14 zeros ]  ─▶  cut to 50

      3. Pick the kernel by which gates are given, hand the present per-token arrays
         to chunked_call in the order the kernels take them (beta, then log_decay),
         and cut the output back to the T real tokens.
    """
    raise NotImplementedError


def linear_attention(q, k, v, *, chunk=64):
    """PROVIDED: o_t = q_t S_t with S_t = S_{t-1} + k_t^T v_t."""
    return chunked_attention(q, k, v, chunk=chunk)


def gated_linear_attention(q, k, v, log_decay, *, chunk=64):
    """PROVIDED: o_t = q_t S_t with S_t = exp(log_decay_t) S_{t-1} + k_t^T v_t."""
    return chunked_attention(q, k, v, log_decay=log_decay, chunk=chunk)


def delta_rule(q, k, v, beta, *, chunk=64):
    """PROVIDED: o_t = q_t S_t with S_t = S_{t-1} + beta_t k_t^T (v_t - k_t S_{t-1})."""
    return chunked_attention(q, k, v, beta=beta, chunk=chunk)


def gated_delta_rule(q, k, v, beta, log_decay, *, chunk=64):
    """PROVIDED: o_t = q_t S_t with
    S_t = g_t S_{t-1} + beta_t k_t^T (v_t - g_t k_t S_{t-1}), g_t = exp(log_decay_t)."""
    return chunked_attention(q, k, v, log_decay=log_decay, beta=beta, chunk=chunk)
