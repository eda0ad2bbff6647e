"""Softmax and norms: the row-wise kernels between the matmuls, forward and backward.

Run `pytest exercises/test_norms.py` after every edit; add `-k <puzzle>` for
one puzzle and `--hint` when stuck. Replace each `raise NotImplementedError`
with your code; keep the signatures.

The mental model of this chapter
--------------------------------
Between every two matmuls of a transformer sits a row-wise kernel: a softmax over
scores, an RMSNorm or a LayerNorm over each token's features, and at the very end
the loss. Each treats every row on its own: it reads the row, works out a few
numbers about it (its max and sum, its mean square), and writes a row of the same
size back.

    x [R, C]                                           o [R, C]
    ┌───────────────────────┐                        ┌───────────────────────┐
    │ row 0 ────────────────┼─▶ max, sum of row 0 ─▶ │ row 0                 │
    │ row 1 ────────────────┼─▶ max, sum of row 1 ─▶ │ row 1                 │
    │ ...                   │                        │ ...                   │
    └───────────────────────┘                        └───────────────────────┘

A matmul does hundreds of flops for every byte it reads; these kernels do a
handful. Their speed is HBM bandwidth and nothing else, so the whole game is
bytes: read x once, write o once, keep everything in between in VMEM. Written as
separate JAX ops (a max, a subtraction, an exp, a sum, a division), every step
reads and writes the whole array from HBM; fused in one kernel, the data makes
one trip.

Three things come back in every puzzle:

  * float32 statistics. Inputs are often bfloat16, which keeps 8 significant bits:
    256 + 1 is 256 in bf16. A sum of thousands of small terms kept in bf16 loses
    them. Cast to float32 when you read a block, compute every statistic in
    float32, and round to the output's dtype once, when you store.
  * the tail. A block that hangs off the end of an array holds garbage there (NaN
    in interpret mode). Garbage rows are harmless where rows never mix: their
    results are dropped on the way back to HBM. But garbage columns enter their
    row's max and sum, and garbage rows enter any sum over rows (the gradient of a
    parameter): those must be masked, with iota and program_id (basics.tail).
  * the backward. jax.grad cannot differentiate a kernel. A differentiable puzzle
    writes its backward as a kernel too, ties the two together with
    jax.custom_vjp (flash.backward), and chooses what the forward saves for it:
    as little as possible, because every saved byte is written and read again.

The arc: softmax over whole rows (1), over rows too long for VMEM (2), its
backward (3); RMSNorm forward (4) and backward (5); LayerNorm, forward and
backward (6); and the loss of a language model over a large vocabulary without
ever building its [T, V] logits, forward (7) and backward (8).

The chapter's public API, your pieces put together: softmax, rms_norm, layer_norm
and cross_entropy, each for any sizes, float32 or bfloat16, differentiable.

Dimension letters: R rows and C columns (softmax); D model dim, the features each
row of a norm has; T tokens and V vocabulary (the loss). block_rows, block_cols,
block_t and block_v are block sizes along R, C, T and V. The tests run your
kernels on CPU in Pallas's TPU interpret mode, which fills fresh buffers with NaN,
so a missing initialisation or an unmasked tail shows.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


# 1. norms.row_softmax — one row block per grid step, the whole row in VMEM ------

def softmax_rows_kernel(x_ref, o_ref):
    """The softmax of each row of this block: x_ref and o_ref are (block_rows, C).

        softmax(x)[c] = exp(x[c]) / (exp(x[0]) + exp(x[1]) + ... + exp(x[C - 1]))

    Why subtract the max? exp overflows float32 beyond about 88: a row of logits
    in the hundreds gives inf / inf = NaN. But softmax(x) = softmax(x - m) for any
    number m (the factor exp(-m) cancels between numerator and denominator). With
    m the row's max, every exponent is <= 0, so every exp is at most 1 and the
    largest is exactly 1: nothing overflows, and the sum is at least 1.

    Why float32? x may be bfloat16. Compute the max, the exp and the sum in
    float32 (cast the block when you read it) and cast the result to o_ref.dtype
    when you store it.

    The statistics run along each row, axis 1. Reduce with keepdims=True: the
    row max is then a (block_rows, 1) column, which broadcasts against the
    (block_rows, C) block in x - m.
    """
    raise NotImplementedError


def softmax_rows(x, *, block_rows=8):
    """softmax over the last axis of x [R, C], one grid step per block of rows.

    Each grid step gets block_rows whole rows: everything a row's statistics
    need is in VMEM at once, and each row is read once and written once.

        x [R, C], R = 20, block_rows = 8                 o [R, C]
        ┌──────────────────────────┐                   ┌──────────────────────┐
        │ rows 0..7     block 0    │─ i=0 ─▶ kernel ─▶ │ block 0              │
        │ rows 8..15    block 1    │─ i=1 ─▶ kernel ─▶ │ block 1              │
        │ rows 16..19   block 2    │─ i=2 ─▶ kernel ─▶ │ block 2              │
        ├ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─┤                   ├ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─┤
        │ rows 20..23: garbage     │                   │ dropped on the way   │
        └──────────────────────────┘                   └──────────────────────┘

    R need not be a multiple of block_rows: round the grid up (pl.cdiv). The
    last block then hangs off the end of x and its extra rows hold garbage. Here
    that does no harm: rows never mix, so garbage rows only make garbage results
    in rows that Pallas drops when it copies the block back to HBM. No mask.

    The block is (block_rows, C): a multiple of 8 rows, and the whole row (a block
    dim may always equal the array's). The rows are independent work: mark the
    grid axis "parallel" (compiler_params, as in basics.row_sum).
    """
    raise NotImplementedError


# 2. norms.long_rows — rows too long for VMEM: two passes over column blocks ------

def softmax_long_kernel(x_ref, o_ref, m_scratch, l_scratch, *, C):
    """One grid step (i, phase, j) of a softmax over rows too long for VMEM.

    x_ref, o_ref (block_rows, block_cols): column block j of row block i.
    m_scratch, l_scratch (block_rows, 1) float32: the running max and sum of each
    row, kept in VMEM from step to step. C: the row length (static).

    A row of a 128k vocabulary is 512 KiB in float32; a block of 8 such rows, two
    buffers each for the input and the output, takes 16 MiB, all of a TPU core's
    VMEM. So the row is cut into column blocks. But softmax needs the row's max
    and sum before it can write a single value. Two passes over the row:

        step (i, phase, j):     j → 0       1       2       3
        phase 0  statistics       fold  ─▶  fold  ─▶  fold  ─▶  fold      m, l final
        phase 1  output           write     write     write     write     o block j

    Phase 0 folds each column block into the running max m and sum l, exactly as
    flash.online_softmax_step folded scores, without the values: when the max
    grows from m to m_new, the sum so far, taken against m, is multiplied by
    exp(m - m_new), then the block's own terms, taken against m_new, are added.
    Phase 1 reads each block again and writes exp(x - m) / l.

    The statistics start at the first step of phase 0 (m = -inf, l = 0): two
    conditions at once. pl.when takes a traced bool; combine two comparisons
    with &, each in parentheses. Phase 1 must not reset them.

    The tail: the last column block hangs off the end of the row when C is not
    a multiple of block_cols, and its extra columns hold garbage that would enter
    the max and the sum. Give them -inf (exp(-inf) = 0): the column of each
    element is j * block_cols plus its position in the block
    (jax.lax.broadcasted_iota along axis 1, as in basics.tail), and jnp.where
    keeps x where that column is < C.

    Keep m and l in float32 whatever x's dtype: a bf16 running sum over many
    blocks drops the small terms of the tail one block at a time.
    """
    raise NotImplementedError


def softmax_long(x, *, block_rows=8, block_cols=128):
    """softmax over the last axis of x [R, C], in (block_rows, block_cols) blocks.

    The grid is (pl.cdiv(R, block_rows), 2, pl.cdiv(C, block_cols)): a row block,
    then the phase, then the column block, fastest. The phase is a grid axis of
    size 2 like any other; the kernel asks pl.program_id(1) which pass it is in.

    x's index map names column block j of row block i, in both phases: x is read
    twice, once per pass, and never whole.

    The output's index map is the puzzle. The pipeline copies an output block back
    to HBM whenever the block's index is about to change. During phase 0 the
    kernel writes nothing; if the output followed j there, every block would be
    copied back full of garbage, then again in phase 1: twice the writes (the
    test counts them). Which single block could the output name during all of
    phase 0, so that nothing reaches HBM before phase 1 has written it? An index
    map is arithmetic on the grid indices: (i, phase, j) -> (row block, column
    block).

    Scratch: two (block_rows, 1) float32 buffers. The row blocks are independent
    ("parallel"); the phase and the column blocks carry state ("arbitrary").
    """
    raise NotImplementedError


# 3. norms.softmax_grad — the backward as a kernel, and jax.grad -----------------

def softmax_backward_kernel(y_ref, dy_ref, dx_ref, s_scratch, *, C):
    """One grid step (i, phase, j) of the softmax backward: dx from y and dy only.

    y_ref (the forward's output), dy_ref (the cotangent), dx_ref: (block_rows,
    block_cols); s_scratch (block_rows, 1) float32; C: the row length (static).

    The math. With y = softmax(x), dy_c / dx_k = y_c (1[c == k] - y_k), so

        dx_k = sum_c dy_c y_c (1[c == k] - y_k) = y_k (dy_k - s),   s = sum_c dy_c y_c

    One number per row, s, then an elementwise formula. Neither x, nor the max,
    nor the sum of the forward is needed: only y and dy.

    The grid is the one of puzzle 2, (row blocks, 2, column blocks), and so is
    the plan: phase 0 adds each block's share of s into s_scratch (zeroed at the
    first step of phase 0); phase 1 writes y * (dy - s). The tail again: columns
    past C hold garbage in y and dy; they must add nothing to s.

    In float32, as always: read y and dy as float32, store dx in dx_ref.dtype.
    """
    raise NotImplementedError


def softmax_backward(y, dy, *, block_rows=8, block_cols=None):
    """dx [R, C] of softmax for its output y [R, C] and the cotangent dy [R, C].

    block_cols=None means whole rows: one column block of C columns. The grid and
    index maps are those of softmax_long, with two inputs. Notice what happens
    when there is a single column block: y's and dy's block index is the same in
    both phases, so the pipeline fetches each block once, and one kernel serves
    short and long rows alike.

    dx takes dy's dtype.
    """
    raise NotImplementedError


def softmax(x, *, block_rows=16, block_cols=None):
    """Softmax over the last axis of x [R, C], differentiable: the chapter's softmax.

    block_rows: rows per block, a positive multiple of 8; when R is smaller, use R.
    block_cols: None keeps whole rows (softmax_rows); otherwise a positive multiple
    of 128 (when C is smaller, use C), and rows go through softmax_long.

    JAX cannot differentiate your kernels, so give it the backward, as in
    flash.flash_core:

        @jax.custom_vjp
        def probabilities(x):            # the function jax.grad sees
            ...
        def probabilities_forward(x):    # -> (y, residuals)
            ...
        def probabilities_backward(residuals, dy):   # -> a tuple, one per input
            ...
        probabilities.defvjp(probabilities_forward, probabilities_backward)

    What should the forward keep? The backward needs y and dy only, and y is the
    forward's own output. Keeping x instead would not do: the backward would
    have to recompute the softmax.

    Check the arguments first: raise ValueError, naming the argument, for an x
    that is not a 2-D floating array, and for block sizes that are not positive
    multiples of 8 (block_rows) or 128 (block_cols).
    """
    raise NotImplementedError


# 4. norms.rms_forward — RMSNorm, and the residual the backward needs -----------

def rms_norm_forward_kernel(x_ref, scale_ref, y_ref, inv_rms_ref, *, eps):
    """RMSNorm of each row of this block, and 1 / rms per row for the backward.

    x_ref, y_ref (block_rows, D); scale_ref (1, D); inv_rms_ref (block_rows, 1)
    float32. eps: a small number (static).

    RMSNorm rescales each row to a root mean square of 1, then multiplies each
    feature by a learned scale:

        rms = sqrt(mean over the row of x^2 + eps)     one number per row
        y   = x / rms * scale                          scale: one number per feature

    eps keeps a row of zeros finite; it goes inside the square root. New here:
    jax.lax.rsqrt(v) computes 1 / sqrt(v) in one op.

    The backward (next puzzle) needs x_hat = x / rms, the normalised row. Save it?
    It is [R, D], as large as x: written here and read back there, two more
    trips over the whole array. Save 1 / rms instead, one float per row, and let
    the backward recompute x_hat from x, which it reads anyway.

    Statistics in float32; y in y_ref's dtype; 1 / rms in float32.
    """
    raise NotImplementedError


def rms_norm_forward(x, scale, *, eps=1e-6, block_rows=8):
    """RMSNorm of x [R, D] with scale [D]: returns (y [R, D] in x's dtype,
    inv_rms [R, 1] float32).

    One grid step per block of rows, as in softmax_rows (D is the whole row).

    Two outputs: out_shape and out_specs are lists, and the kernel gets one ref
    per output, in that order. inv_rms is an [R, 1] array in (block_rows, 1)
    blocks: legal on a TPU because its last dim equals the array's (flash stored
    lse the same way). Its rows belong to the row block, like y's.

    scale is [D]: reshape it to [1, D] (a reshape is free) and pass it whole as a
    (1, D) block. Its block index is the same at every step, so the pipeline
    fetches it once.
    """
    raise NotImplementedError


# 5. norms.rms_backward — dx per row block, dscale summed over all of them --------

def rms_norm_backward_kernel(x_ref, scale_ref, inv_rms_ref, dy_ref, dx_ref, dscale_ref,
                             dscale_scratch, *, R):
    """One row block of RMSNorm's backward: its dx, and its share of dscale.

    x_ref, dy_ref, dx_ref (block_rows, D); scale_ref, dscale_ref (1, D);
    inv_rms_ref (block_rows, 1) float32; dscale_scratch (1, D) float32. R: the
    number of rows (static).

    The math, per row (r = 1 / rms, saved by the forward):

        x_hat = x * r,     y = x_hat * scale,     g = dy * scale
        dx     = r * (g - x_hat * mean over the row of (g * x_hat))
        dscale = sum over every row of dy * x_hat

    dx is per row, like the forward. dscale is not: each feature's scale touched
    every row, so its gradient is a sum over all R rows, across all the row
    blocks of the grid. The grid's only axis is now a reduction axis: dscale's
    block is the same (1, D) block at every step, so it stays in VMEM while the
    row blocks go by and is written back once, at the end (basics.row_sum).
    Accumulate in the float32 scratch (scale may be bf16): zero it at the first
    step, add this block's sum at every step, store it at the last.

    The tail: rows past R in the last block are garbage (NaN in interpret mode).
    Their dx is dropped, but their dy * x_hat would enter dscale. Mask them out
    of the sum (row = program id * block_rows + iota along axis 0, as in
    basics.tail).
    """
    raise NotImplementedError


def rms_norm_backward(x, scale, inv_rms, dy, *, block_rows=8):
    """(dx [R, D] in dy's dtype, dscale [D] in scale's dtype) of RMSNorm.

    x [R, D], scale [D], inv_rms [R, 1] float32 (rms_norm_forward's), dy [R, D].

    The call is rms_norm_forward's with four inputs and two outputs, and one
    difference that matters: the dimension semantics. A "parallel" axis may be
    split between the two TensorCores of a TPU chip (v4, v5p): each core would
    add half the row blocks into its own copy of the dscale block, and one
    copy would overwrite the other. A sum across an axis needs its steps in
    order, on one core: mark the axis "arbitrary". (The alternative keeps the
    rows parallel: each step writes its block's partial sum, a [num_blocks, D]
    array, and a second small kernel adds them up.)
    """
    raise NotImplementedError


def rms_norm(x, scale, *, eps=1e-6, block_rows=16):
    """RMSNorm of the rows of x [R, D] with scale [D], differentiable in x and scale.

    The chapter's rms_norm: rms_norm_forward's y, with rms_norm_backward as its
    VJP (jax.custom_vjp, as softmax). The residuals: x, scale and inv_rms; never
    the normalised rows. The backward returns one gradient per input: (dx,
    dscale).

    Check the arguments first (ValueError naming the argument): x 2-D, scale of
    shape [D], block_rows a positive multiple of 8. When R < block_rows, use R.
    """
    raise NotImplementedError


# 6. norms.layer_norm — mean and variance, dscale and dbias ------------------------

def layer_norm_forward_kernel(x_ref, scale_ref, bias_ref, y_ref, mean_ref, rstd_ref, *, eps):
    """LayerNorm of each row of this block, and the two numbers per row it saves.

    x_ref, y_ref (block_rows, D); scale_ref, bias_ref (1, D); mean_ref, rstd_ref
    (block_rows, 1) float32.

        mean = the row's mean,     var = the mean of (x - mean)^2
        rstd = 1 / sqrt(var + eps)
        y    = (x - mean) * rstd * scale + bias

    LayerNorm is RMSNorm with the mean taken out first, and a bias. The variance
    is the mean square of the centred values. Textbooks also write it
    E[x^2] - E[x]^2, which in float32 cancels catastrophically when a row sits far
    from zero: mean 100, std 1 gives E[x^2] = 10001 and E[x]^2 = 10000, and their
    difference keeps three of float32's seven digits. Centre first.

    Save mean and rstd, one float each per row (the backward recomputes x_hat).
    """
    raise NotImplementedError


def layer_norm_forward(x, scale, bias, *, eps=1e-5, block_rows=8):
    """LayerNorm of x [R, D] with scale, bias [D]: (y [R, D] in x's dtype,
    mean [R, 1] float32, rstd [R, 1] float32).

    rms_norm_forward's call with one more input and one more output.
    """
    raise NotImplementedError


def layer_norm_backward_kernel(x_ref, scale_ref, mean_ref, rstd_ref, dy_ref, dx_ref,
                               dscale_ref, dbias_ref, dscale_scratch, dbias_scratch, *, R):
    """One row block of LayerNorm's backward: its dx, its share of dscale and dbias.

        x_hat  = (x - mean) * rstd,      g = dy * scale
        dx     = rstd * (g - mean over the row of g - x_hat * mean over the row of (g * x_hat))
        dscale = sum over every row of dy * x_hat
        dbias  = sum over every row of dy

    The extra term, the mean of g, is the mean's own gradient: moving every
    feature of a row by the same amount moves its mean and changes nothing.
    Two sums across row blocks now, each with its float32 scratch, zeroed at the
    first step and stored at the last; rows past R masked out of both.
    """
    raise NotImplementedError


def layer_norm_backward(x, scale, mean, rstd, dy, *, block_rows=8):
    """(dx [R, D] in dy's dtype, dscale [D], dbias [D] in scale's dtype) of LayerNorm.

    rms_norm_backward's call with one more per-row input and one more sum.
    """
    raise NotImplementedError


def layer_norm(x, scale, bias, *, eps=1e-5, block_rows=16):
    """LayerNorm of the rows of x [R, D], differentiable in x, scale and bias.

    The chapter's layer_norm, tied together like rms_norm: residuals x, scale,
    mean and rstd; the backward returns (dx, dscale, dbias). Check the arguments
    first (ValueError naming the argument): x 2-D, scale and bias of shape [D],
    block_rows a positive multiple of 8; when R < block_rows, use R.
    """
    raise NotImplementedError


# 7. norms.fused_xent — the loss over vocabulary blocks, no [T, V] array ------------

def cross_entropy_forward_kernel(h_ref, w_ref, labels_ref, loss_ref, lse_ref, m_scratch,
                                 l_scratch, picked_scratch, *, V):
    """One grid step (t, v): fold vocabulary block v into token block t's loss.

    h_ref (block_t, D): this block's hidden states; w_ref (D, block_v): this
    block of the output projection; labels_ref (block_t, 1) int32; loss_ref,
    lse_ref (block_t, 1) float32; m_scratch, l_scratch, picked_scratch
    (block_t, 1) float32. V: the vocabulary size (static).

    A language model ends with logits = h @ w, [T, V], and the loss of each token

        loss = logsumexp(logits) - logits[label]     logsumexp = log of the sum of exp

    With T = 8192 tokens and V = 128k words, the logits take 4 GiB in float32:
    written to HBM, read back for the softmax, written again as probabilities
    for the backward. This kernel never builds them. Each grid step multiplies
    one block of h by one block of w: a (block_t, block_v) tile of logits that
    lives in VMEM for that step only, and is folded into three running numbers
    per token:

        h [T, D]          w [D, V], vocabulary blocks v →
                            ┌──────┬──────┬──────┬──────┐
                            │  w0  │  w1  │  w2  │  w3  │
                            └──────┴──────┴──────┴──────┘
        ┌──────┐
        │  h0  │ ─▶ h0 @ w0 ─ fold ─▶ h0 @ w1 ─ fold ─▶ ... ─▶ loss of h0's tokens
        ├──────┤    (block_t, block_v) tile: VMEM only
        │  h1  │ ─▶ h1 @ w0 ─ fold ─▶ ...
        └──────┘

      m, l     the running max and sum of exp: softmax_long's phase 0, so that
               logsumexp = m + log(l) once every block is in
      picked   the label's logit. It lies in exactly one vocabulary block: where
               a tile's column equals the token's label, add that logit; add 0
               everywhere else.

    The product: jnp.dot of an h block and a w block, with
    preferred_element_type=jnp.float32 (bf16 inputs, float32 logits, as in
    matmul). The tail: vocabulary columns past V hold garbage; give their
    logits -inf. Start the three numbers at the first v step; at the last,
    store lse and the loss.
    """
    raise NotImplementedError


def cross_entropy_forward(h, w, labels, *, block_t=128, block_v=512):
    """The per-token loss and logsumexp: h [T, D], w [D, V], labels int32 [T] ->
    (loss [T] float32, lse [T, 1] float32).

    The grid is (pl.cdiv(T, block_t), pl.cdiv(V, block_v)), the vocabulary last:
    it is the reduction axis ("arbitrary"); the token blocks are independent
    ("parallel"). h moves in (block_t, D) blocks that follow t, w in (D, block_v)
    blocks that follow v (D is whole in both). h's block stays put while v runs:
    it is fetched once; w is fetched once per token block.

    Per-token values (labels in, the loss and lse out) travel as [T, 1] arrays in
    (block_t, 1) blocks, as inv_rms did: reshape labels to [T, 1] before the call
    and the loss back to [T] after it. Keep lse [T, 1]: the backward reads it.
    """
    raise NotImplementedError


# 8. norms.xent_backward — dh and dw, recomputing the logits block by block ------------

def cross_entropy_dh_kernel(h_ref, w_ref, labels_ref, lse_ref, dloss_ref, dh_ref,
                            dh_scratch, *, V):
    """One grid step (t, v) of dh: add vocabulary block v's share to token block t.

    h_ref (block_t, D), w_ref (D, block_v); labels_ref, lse_ref, dloss_ref
    (block_t, 1); dh_ref (block_t, D); dh_scratch (block_t, D) float32.

    The math, per token (dloss: the cotangent of its loss):

        p       = softmax(logits) = exp(logits - lse)     the forward's lse normalises
        dlogits = (p - onehot(label)) * dloss             [T, V], one tile at a time
        dh      = dlogits @ w^T                           sums over the vocabulary
        dw      = h^T @ dlogits                           sums over the tokens

    Recompute the tile of logits (one dot), turn it into this tile of dlogits
    (the label's column again compared with the tile's columns), then add its
    product with this w block's transpose to dh (jnp.einsum contracts the
    vocabulary dim without a transpose, as in flash). Accumulate in float32,
    over the v axis; store at its last step.

    The tail, with a twist: columns of w past V hold garbage, NaN in interpret
    mode, and masking dlogits is not enough when garbage is an operand of a dot
    (0 * NaN is NaN). Zero the garbage columns of w before you use it.
    """
    raise NotImplementedError


def cross_entropy_dw_kernel(h_ref, w_ref, labels_ref, lse_ref, dloss_ref, dw_ref,
                            dw_scratch, *, T):
    """One grid step (v, t) of dw: add token block t's share to vocabulary block v.

    Refs as in cross_entropy_dh_kernel, with dw_ref (D, block_v) and dw_scratch
    (D, block_v) float32. The grid is (vocabulary blocks, token blocks), tokens
    last: the sum runs over t.

    The same tile of dlogits, now multiplied the other way: h block transposed
    times dlogits. The tail that matters here is the tokens': rows past T of h,
    and of labels, lse and dloss, are garbage. Zero them in h and in dlogits
    before the dot.
    """
    raise NotImplementedError


def cross_entropy_backward(h, w, labels, lse, dloss, *, block_t=128, block_v=512):
    """(dh [T, D] in h's dtype, dw [D, V] in w's dtype) of the per-token loss.

    h [T, D], w [D, V], labels int [T], lse [T, 1] float32 (the forward's),
    dloss [T] float32 (the cotangent of the loss).

    Two sums over two different axes, so two pallas_calls (flash.backward again),
    each recomputing the logits tile by tile instead of reading them: the fused
    trade, twice the matmuls for no [T, V] array at all.

        dh   grid (token blocks, vocabulary blocks)    sums over v
        dw   grid (vocabulary blocks, token blocks)    sums over t

    Index maps receive the grid's indices in the grid's order: in the dw call,
    (v, t). Per-token inputs travel as [T, 1] arrays in (block_t, 1) blocks.
    """
    raise NotImplementedError


def cross_entropy(h, w, labels, *, block_t=128, block_v=512):
    """Per-token cross-entropy of softmax(h @ w) against labels, fused and differentiable.

    h [T, D], w [D, V], labels integers [T] in [0, V). Returns the loss [T],
    float32, differentiable in h and w (jax.custom_vjp; the residuals: h, w,
    labels and lse, never the logits). labels is an input of the custom_vjp
    function like h and w, but integers have no gradient: the backward returns
    None in its place.

    Check the arguments first, raising ValueError that names the argument: h and
    w 2-D with matching D, labels integers of shape [T], block_t a positive
    multiple of 8, block_v of 128 (each shrinks to its dim when larger). A label
    outside [0, V) would read the wrong logit without a word: when the labels
    are concrete (a NumPy array, or a jax.Array outside jit), check their values
    too. Under jit they are traced and have no values yet: np.asarray of a
    traced array raises a TypeError, which tells the two apart.
    """
    raise NotImplementedError


def _check_block(function, name, block, multiple):
    """PROVIDED: raises a ValueError naming the argument unless block is a positive
    multiple of multiple (8 for rows and tokens, 128 for columns and vocabulary)."""
    if not isinstance(block, (int, np.integer)) or block <= 0 or block % multiple:
        raise ValueError(f"{function}: {name}={block!r} must be a positive multiple of "
                         f"{multiple}")
