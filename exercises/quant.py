"""Quantised matmuls and a convolution: integers on the MXU, weights in 4 bits.

Run `pytest exercises/test_quant.py` after every edit; add `-k <puzzle>` for
one puzzle and `--hint` when stuck. Replace each `raise NotImplementedError`
with your code; keep the signatures.

The mental model of this chapter
--------------------------------
Serving a model is mostly moving weights. To produce one token, every weight
crosses from HBM into VMEM once, and the MXU waits for it. Store a weight in 8
bits instead of 16 and half the bytes cross; in 4 bits, a quarter. And a TPU's
MXU multiplies int8 natively, at twice its bf16 rate on a v5e (394 int8 TOPS
next to 197 bf16 TFLOPS).

A quantised number is an integer times a scale:

        x  ~  q * scale          q an int8 in [-127, 127], scale a float32

with one scale per row of a matrix (per channel, for weights): each row spends
all 255 levels on its own range, whatever the size of the other rows.

                    x (float)                 q (int8)          scale
    row 0     0.50  -1.00  0.25  0.02    ->   64 -127  32   3     1 / 127
    row 1      900   -300   127    10    ->  127  -42  18   1     900 / 127
    row 2        0      0     0     0    ->    0    0   0   0     1 (nothing to scale)

Why the scales cost nothing in a matmul: a scale per row of a and a scale per
column of b factor out of the sum over K,

    sum_k (a_q[m, k] sa[m]) (b_q[k, n] sb[n])  =  sa[m] sb[n] * sum_k a_q[m, k] b_q[k, n]
                                                               └──── integers only ────┘

so the whole K loop runs on integers, exactly, and the floats come in once per
output, at the end: the fused epilogue of matmul.epilogue.

When only the weights are quantised and the activations stay bf16 ("weight-only",
W8A16 and W4A16), the integers become floats in VMEM, one block at a time, right
before the MXU: HBM only ever carries the small integers.

A convolution is matmuls too. Each of the KH x KW taps of a filter is a [C, F]
matrix, and the output is the sum over the taps of the image, shifted by the tap,
times the tap's matrix. A kernel computes a tile of output rows from the input
rows the tile needs, and the few rows it shares with the next tile (the halo) are
read twice.

    1 quantize     per-row int8 quantisation in a kernel: quantize_int8()
    2 int8_dot     int8 x int8 with an int32 accumulator, exact
    3 dequant      the scales once, at the last K step: int8_matmul()
    4 weight_only  float activations, int8 weights: int8_weight_matmul()
    5 int4         two 4-bit weights per byte, group scales and zero points: int4_matmul()
    6 halo         a SAME convolution from windows of rows, halo included
    7 strided      stride 2 and blocks of output channels: conv2d()

Dimension letters: R and C the rows and columns of a matrix to quantise; M rows of
a and of the output, K the summed dim, N columns of b and of the output; bm, bk, bn
the block sizes along M, K and N. For the convolution: B batch, H and W the
image's height and width, C input channels, F output channels, KH and KW the
filter's height and width, Ho and Wo the output's height and width. The tests run
your kernels on CPU in Pallas's TPU interpret mode, which fills fresh float buffers
with NaN and fresh int32 ones with 2147483647 (the largest int32: integers have no
NaN), so a forgotten initialisation shows.
"""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


# 1. quant.quantize — symmetric per-row int8 quantisation ----------------------

def quantize_kernel(x_ref, q_ref, scale_ref):
    """Quantise every row of the block: x_ref (block_rows, C) float; q_ref
    (block_rows, C) int8; scale_ref (block_rows, 1) float32.

    For each row, in float32 (cast bf16 up first):

        scale = max |x| / 127                  the largest |x| lands on 127
        q     = x / scale, rounded to the nearest integer, clipped to [-127, 127]

    - The row's max is a reduction along the row: axis=1 with keepdims=True keeps
      it (block_rows, 1), a column that broadcasts against the rows of x.
    - Round, never truncate: .astype(jnp.int8) alone chops toward zero (2.9 becomes
      2), and every value loses half a level on average. jnp.round rounds to the
      nearest integer (halves to even, as NumPy does).
    - Clip before the cast: a float outside int8's range has no int8 to become.
      -128 stays unused, so that -q exists for every q: the grid is symmetric.
    - A row of zeros has max 0, and 0 / 0 is NaN: give it scale 1 (jnp.where), so
      that nothing divides by zero and its q is 0.
    """
    raise NotImplementedError


def quantize_int8(x, *, block_rows=32):
    """(q int8 [R, C], scale float32 [R, 1]) for x [R, C] float, by quantize_kernel.

    Why a kernel: quantising activations happens before every int8 matmul, and it is
    pure memory traffic. Fused into one kernel it reads x once and writes q (a quarter
    of x's float32 bytes) and one scale per row; in plain JAX, the max, the division,
    the rounding and the cast each make their own trip through HBM.

    A 1-D grid over blocks of whole rows (a row's max needs all of its columns):

            x [R, C]                 q [R, C]         scale [R, 1]
            ┌────────────────┐       ┌────────────┐   ┌─┐
      i = 0 │ block_rows     │  ──▶  │            │   │ │
            ├────────────────┤       ├────────────┤   ├─┤
      i = 1 │                │  ──▶  │            │   │ │
            ├────────────────┤       ├────────────┤   ├─┤
      i = 2 │ (partial)      │  ──▶  │            │   │ │
            └────────────────┘       └────────────┘   └─┘

    New here: two outputs. out_shape is a tuple of two jax.ShapeDtypeStructs, and
    out_specs a tuple of two BlockSpecs in the same order; the kernel gets one ref
    per output after its inputs, and pl.pallas_call returns the tuple:

        out_shape=(jax.ShapeDtypeStruct(..., jnp.int8), jax.ShapeDtypeStruct(...))
        out_specs=(pl.BlockSpec(...), pl.BlockSpec(...))

    R need not be a multiple of block_rows: round the grid up (pl.cdiv); the rows of a
    last block past R are computed and dropped. The scale's blocks are (block_rows, 1):
    legal on a TPU because 1 is the whole last dim. Every row block is independent
    ("parallel").
    """
    raise NotImplementedError


# 2. quant.int8_dot — int8 x int8 with an int32 accumulator --------------------

def int8_matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    """matmul.matmul_kernel for int8: add a_ref @ b_ref to an int32 running sum and
    store it at the last k step.

    a_ref (bm, bk) int8; b_ref (bk, bn) int8; o_ref (bm, bn) int32; acc_ref (bm, bn)
    an int32 scratch. K is grid axis 2.

    Why int32. One product of two int8 values reaches 127 * 127 = 16129 (14 bits),
    and a sum of K of them log2(K) bits more:

        in int8      the second term already overflows, and wraps around without a
                     word (127 + 1 is -128);
        in float32   whole numbers are exact only up to 2^24: 1040 extreme products;
        in int32     exact up to 133,000 of them.

    The MXU multiplies int8 blocks and adds the products in int32 when asked:

        jnp.dot(a, b, preferred_element_type=jnp.int32)   # int8 x int8 -> int32 sums

    Without preferred_element_type, jnp.dot of two int8 blocks returns int8, every
    sum wrapped around (and no TPU takes the kernel: its MXU adds in 32 bits).

    The rest is matmul.matmul_kernel: zero the scratch at k == 0, add at every step,
    store at the last one. The sums are exact: nothing to round, only overflow to
    avoid.
    """
    raise NotImplementedError


def int8_matmul_int32(a_q, b_q, *, bm=128, bk=128, bn=128):
    """a_q @ b_q for int8 a_q [M, K] and b_q [K, N]: int32 [M, N], exact; bk divides K.

    The call is matmul.matmul_tiled's with int8 in, int32 out and an int32 scratch:
    the grid (cdiv(M, bm), cdiv(N, bn), K // bk), K last; a_q in (bm, bk) blocks, b_q
    in (bk, bn) blocks, the output in (bm, bn) tiles, each index map as in matmul.
    (On a TPU an int8 vreg tile holds 32 rows: bm a multiple of 32.)

    The tests compare with integer NumPy, exactly, on values across [-127, 127] with
    whole rows and columns of the extremes.
    """
    raise NotImplementedError


# 3. quant.dequant — the scales once, at the last K step: int8_matmul() ----------

def int8_dequant_kernel(a_ref, a_scale_ref, b_ref, b_scale_ref, o_ref, acc_ref):
    """int8_matmul_kernel's int32 sum, times the rows' and the columns' scales at the
    last k step.

    a_ref (bm, bk) int8; a_scale_ref (bm, 1) float32; b_ref (bk, bn) int8;
    b_scale_ref (1, bn) float32; o_ref (bm, bn) float32; acc_ref (bm, bn) int32.

        first k step:  acc = 0
        every k step:  acc += a @ b                       int32, exact
        last k step:   o = acc * a_scale * b_scale        float32, once per tile

    The scales factor out of the sum over K (the chapter's introduction): they
    multiply the finished sum, once. Multiplying each step's product instead makes
    the running sum a float (no longer exact past 2^24) and costs a multiply per
    element at every step. A (bm, 1) column times a (1, bn) row broadcasts to the
    tile: row m's scale down its row, column n's across its column.
    """
    raise NotImplementedError


def int8_matmul(a_q, a_scale, b_q, b_scale, *, bm=128, bk=128, bn=128):
    """(a_q @ b_q) * a_scale * b_scale for int8 a_q [M, K] with float32 a_scale [M, 1]
    and int8 b_q [K, N] with float32 b_scale [1, N]: float32 [M, N], any M, K, N.

    The chapter's int8 matmul, fed as quantize_int8 would feed it: a_q, a_scale from
    the rows of a; b_q, b_scale from the columns of b.

    1. Check the arguments up front, in plain Python, and raise ValueError with a
       message that names the argument: a_q int8 [M, K]; b_q int8 [K, N] with a_q's
       K; a_scale float32 [M, 1]; b_scale float32 [1, N]; bm a positive multiple of
       32, bk and bn of 128.
    2. Any shape, as matmul.matmul: a block as large as its whole dim is always
       legal, so clip each block to its dim. M and N need nothing more. Past the end
       of K a block holds garbage that would reach every output: pad a_q's columns
       and b_q's rows with zeros up to a multiple of bk (jnp.pad; int8 zeros, still
       int8 in HBM).
    3. The call is int8_matmul_int32's with a float32 output and two more inputs, in
       the kernel's order: a_scale in (bm, 1) blocks and b_scale in (1, bn) blocks.
       Which grid index does each of their index maps follow?
    """
    raise NotImplementedError


# 4. quant.weight_only — float activations, int8 weights: int8_weight_matmul() ---

def weight_only_kernel(x_ref, w_ref, w_scale_ref, o_ref, acc_ref):
    """Add x_ref @ (w_ref * scale) to a float32 running sum; store it at the last k.

    x_ref (bm, bk) float32 or bf16; w_ref (bk, bn) int8; w_scale_ref (1, bn) float32;
    o_ref (bm, bn) in x's dtype; acc_ref (bm, bn) float32. K is grid axis 2.

    The MXU multiplies two operands of one type, so the int8 block becomes x's
    dtype in VMEM first, .astype(...): exact, since bf16 holds every integer up to
    256. That cast is the dequantisation, here, for one (bk, bn) block at a time.

    And the scale? It belongs to a column and is the same at every k: like the
    scales of puzzle 3 it factors out of the sum over K. Multiply it into each block
    before the dot, or once into the finished sum at the last k step (bk / bm times
    fewer multiplies): both are right. The running sum is float32 whatever x's dtype
    (matmul.mixed_precision); cast once, at the store.
    """
    raise NotImplementedError


def int8_weight_matmul(x, w_q, w_scale, *, bm=128, bk=128, bn=128):
    """x @ (w_q * w_scale) for x [M, K] float32 or bf16, int8 w_q [K, N] and float32
    w_scale [1, N]: [M, N] in x's dtype, any M, K, N.

    Why: generating one token multiplies a few rows of activations by every weight
    matrix, 2 flops per weight per row, while every weight crosses HBM: the time is
    the weights' bytes over HBM's bandwidth. In int8 that is half of bf16's time, if
    the weights cross HBM as int8. A w_q.astype(...) or w_q * w_scale in JAX before
    the kernel writes a float copy to HBM and reads it back, and the gain is gone
    (the tests count the bytes read from w_q):

        HBM                        VMEM                                MXU
        w_q (bk, bn) int8 ──DMA──▶ int8 block ──astype──▶ x's dtype ──▶ dot ──▶ f32 sum

    1. Check the arguments (ValueError naming the argument): x float [M, K]; w_q int8
       [K, N] with x's K; w_scale float32 [1, N]; bm a positive multiple of 16 (a bf16
       vreg tile's rows), bk and bn of 128.
    2. Clip the blocks to their dims and pad K with zeros (x and w_q), as int8_matmul.
    3. The call: int8_matmul's grid and index maps for x, w_q and the (1, bn) blocks
       of w_scale; the output in x's dtype; a float32 scratch.
    """
    raise NotImplementedError


# 5. quant.int4 — two 4-bit weights per byte: int4_matmul() ------------------------

def int4_kernel(x_ref, packed_ref, scale_ref, zero_ref, o_ref, acc_ref, w_ref):
    """One group of K rows per k step: unpack the group's 4-bit weights into w_ref,
    dequantise them, add x @ w to the running sum.

    x_ref (bm, G) float, G = group_size; packed_ref (G // 2, bn) int8, two weights a
    byte; scale_ref and zero_ref (1, bn) float32, this group's; o_ref (bm, bn);
    acc_ref (bm, bn) float32; w_ref (G, bn) float32, a scratch for the unpacked group.

    The layout (GPTQ's and AWQ's): u in 0..15, two per byte, row 2i of the group in
    the low nibble and row 2i + 1 in the high nibble:

        one byte of packed, [i, n]:   bit  7  6  5  4 │ 3  2  1  0
                                           u[2i+1, n] │ u[2i, n]
                                           high nibble│ low nibble

        packed (G // 2, bn)                   w (G, bn)
        row 0   [hi 0 | lo 0] ...             row 0   lo 0 ...
        row 1   [hi 1 | lo 1] ...      ──▶    row 1   hi 0 ...    each (u - zero) * scale
        ...                                   row 2   lo 1 ...
                                              row 3   hi 1 ...

    Unpacking is integer bit work on an int32 copy of the block, v =
    packed_ref[...].astype(jnp.int32): lax's shifts take two operands of one dtype (an
    int8 block shifted by 4, an int32, is a TypeError), and on int8 jnp's >> is an
    arithmetic shift, which copies the sign bit down. Then:

        v & 0xF                                  # the low 4 bits
        jax.lax.shift_right_logical(v, 4)        # every bit moved down by 4, zeros in

    The byte is read as int8: a byte 0x9A is -102, and its int32 copy 0xFFFFFF9A still
    carries those high 1s after a shift right. Mask the high nibble with 0xF too.

    The weight is then (u - zero) * scale in float32: the zero point is the u that
    stands for 0.0 (an unsigned 4-bit value needs one to reach negative weights), the
    scale the group's step between levels.

    The low nibbles are w's even rows and the high nibbles its odd rows. A strided
    store writes every other row of a ref:

        w_ref[pl.ds(start, size, stride=2), :] = value   # rows start, start + 2, ...

    Then the matmul: x (bm, G) @ w (G, bn) with w cast to x's dtype (one type into the
    MXU), summed in float32 in acc_ref: zero it at k == 0, store at the last k.
    """
    raise NotImplementedError


def int4_matmul(x, w_packed, scales, zeros, *, group_size=128, bm=128, bn=128):
    """x @ W for x [M, K] float and W the 4-bit weights: [M, N] in x's dtype, with

        W[k, n] = (u[k, n] - zeros[g, n]) * scales[g, n],   g = k // group_size

    w_packed int8 [K // 2, N] holds u (puzzle's layout in int4_kernel); scales and
    zeros are float32 [K // group_size, N]. Group-wise: every group_size rows of K
    share a scale and a zero point per column, so one large weight costs its own
    group's resolution, not its whole column's.

    Why 4 bits: a quarter of bf16's bytes over HBM (the tests count the bytes read
    from w_packed: its own bytes, never an unpacked copy), and 16 levels per group
    are enough for most weights of a large model.

    The grid (cdiv(M, bm), cdiv(N, bn), K // group_size): one group per k step, K last.
      - x in (bm, group_size) blocks at (i, k);
      - w_packed in (group_size // 2, bn) blocks at (k, j): the packed rows of group k;
      - scales and zeros: row k, columns j. A (1, bn) block of a [groups, N] array
        breaks the TPU's (8, 128) rule (its 1 is neither 8 rows nor the whole dim), so
        hand them over as [groups, 1, N] (a reshape, free) in (None, 1, bn) blocks: the
        None squeezes the group dim away (matmul.batched) and the kernel sees (1, bn).
    Scratch: the float32 running sum (bm, bn) and the unpacked group (group_size, bn)
    float32, in int4_kernel's order.

    Check the arguments (ValueError naming the argument): x float [M, K]; w_packed
    int8 [K // 2, N] for an even K; group_size dividing K, a multiple of 128 (x's
    blocks are one group wide, and a block's last dim is a whole number of 128-wide
    lanes; groups of 32 or 64 would need several groups' scales in one block, which
    this puzzle leaves out) or K itself; scales and zeros float32
    [K // group_size, N]; bm a positive multiple of 16, bn of 128. Clip bm and bn to
    M and N.
    """
    raise NotImplementedError


# 6. quant.halo — a SAME convolution from windows of rows, halo included ------------

def conv_kernel(x_ref, w_ref, o_ref, *, stride=1):
    """One tile of output rows: the sum over the filter's taps of one matmul each.

    x_ref (rows, Wp, C): the input rows this tile needs, halo and SAME padding
    included; w_ref (KH, KW, C, F) (puzzle 7: (KH, KW, C, block_f)); o_ref
    (block_h, Wo, F). stride: 1 here, 2 in puzzle 7.

    Output pixel (r, c) of the tile is a sum over the taps (kh, kw):

        o[r, c] = sum_{kh, kw}  x[r * stride + kh, c * stride + kw] @ w[kh, kw]
                                └──── a [C] vector ─────────────┘   └ [C, F] ┘

    Fix one tap: over the whole tile, the pixels it reads form a patch of x_ref,
    shifted by (kh, kw), and the tap is one matmul of the patch with w[kh, kw]:

        x_ref (rows, Wp, C)                tap (kh, kw) = (1, 2), stride 1
        ┌─────────────────────────┐
        │ .  .  .  .  .  .  .  .  │        patch: rows kh .. kh + block_h - 1,
        │ .  .  ┌──────────────┐  │               columns kw .. kw + Wo - 1
        │ .  .  │    patch     │  │
        │ .  .  │ (block_h, Wo,│  │        o += patch @ w[kh, kw]
        │ .  .  │     C)       │  │             (block_h, Wo, C) @ (C, F)
        │ .  .  └──────────────┘  │
        └─────────────────────────┘

    KH * KW matmuls in all: Python loops over kh and kw unroll while the kernel is
    traced (the filter's size is static). Read each patch straight from the ref with
    pl.ds(start, size) per dim; a third argument, pl.ds(start, size, stride=stride),
    takes every stride-th row or column (puzzle 7). A 3-D patch times a 2-D matrix
    over C is an einsum:

        jnp.einsum("hwc,cf->hwf", patch, w_tap, preferred_element_type=jnp.float32)

    Sum the taps in float32 and store once, cast to o_ref's dtype. The sizes come
    from the refs: w_ref.shape[:2] is (KH, KW), o_ref.shape[:2] is (block_h, Wo).
    """
    raise NotImplementedError


def conv2d_rows(x, w, *, block_h=8):
    """The SAME convolution of x [B, H, W, C] with w [KH, KW, C, F] at stride 1:
    [B, H, W, F] in x's dtype (lax.conv_general_dilated with padding="SAME": a
    cross-correlation, the filter not flipped).

    Why tiles of rows. An image rarely fits in VMEM beside its filter (224 x 224 x 64
    channels of bf16 is 6 MiB, per image), and output row r needs only KH input rows.
    So cut the output into tiles of block_h rows and give each grid step the input
    rows its tile needs: its own block_h rows and the KH - 1 after them, the halo,
    which the next tile reads again. In padded rows (block_h = 4, KH = 3):

        padded rows
         0  ┐
         1  │ tile 0's window  ─────────▶  output rows 0-3
         2  │
         3  │
         4  │ ┐ halo: tile 0 reads rows 4 and 5 too
         5  ┘ │
         6    │ tile 1's window ─────────▶  output rows 4-7
         7    │
         8    │
         9    ┘

    A window is block_h + KH - 1 rows starting at padded row i * block_h: windows
    overlap, so they are not the blocks of one size at block indices that a BlockSpec
    usually fetches. pl.Element makes a block dim count elements: the block is that
    many elements long, and the index map returns the offset where it starts.

        pl.BlockSpec((pl.Element(window), pl.Element(Wp), pl.Element(C)), index_map)
        # index_map returns element offsets (first row, 0, 0), not block indices;
        # on a TPU a BlockSpec with one Element dim has them all Element

    1. SAME padding at stride 1: (KH - 1) // 2 rows of zeros above and the rest below,
       (KW - 1) // 2 columns left and the rest right (jnp.pad, before the kernel). Pad
       the bottom further, so that the last tile's window lies inside the array when
       block_h does not divide H: Hp = cdiv(H, block_h) * block_h + KH - 1 rows in
       all, Wp = W + KW - 1 columns.
    2. Offsets address one array: fold the batch into the rows, a reshape to
       [B * Hp, Wp, C] (free); row r of image b is row b * Hp + r.
    3. The grid (B, cdiv(H, block_h)): the window of step (b, i) starts at row
       b * Hp + i * block_h; the filter comes whole, the same block at every step;
       the output in (None, block_h, W, F) blocks at (b, i, 0, 0). Both axes
       "parallel".

    The tests count the bytes read from x: each input row at most
    ceil(KH / block_h) + 1 times (one window per tile, never one per tap); and the
    VMEM: a window of rows, never the whole image.
    """
    raise NotImplementedError


# 7. quant.strided — stride 2 and blocks of output channels: conv2d() ---------------

def same_padding(size, k, stride):
    """PROVIDED: (output size, padding before, padding after) of XLA's SAME padding for
    one spatial dim of ``size`` and a filter of ``k`` taps at ``stride``."""
    out = -(-size // stride)
    total = max((out - 1) * stride + k - size, 0)
    return out, total // 2, total - total // 2


def conv2d(x, w, *, stride=1, block_h=8, block_f=None):
    """The SAME convolution at any stride, output channels in blocks: x [B, H, W, C],
    w [KH, KW, C, F] -> [B, Ho, Wo, F] in x's dtype, Ho = cdiv(H, stride), Wo =
    cdiv(W, stride). The chapter's public convolution.

    Stride. Output (r, c) reads input (r * stride + kh, c * stride + kw): a tile of
    block_h output rows needs (block_h - 1) * stride + KH input rows, and tile i's
    window starts at padded row i * block_h * stride. Inside, the patches are strided:
    conv_kernel with its stride bound by functools.partial.

        stride 2, KH = 3, block_h = 2:    window rows   0  1  2  3  4
                                          output row 0  0  1  2
                                          output row 1        2  3  4

    SAME padding depends on the stride: the output has cdiv(H, stride) rows, and the
    padding is what the last output's taps need, the smaller half before. At stride 2
    with an even H it is not symmetric. same_padding(H, KH, stride) (provided)
    returns (Ho, rows before, rows after); pad the bottom further, as in conv2d_rows,
    to (tiles * block_h - 1) * stride + KH rows, and the width to
    (Wo - 1) * stride + KW columns. (A filter smaller than the stride, 1x1 at stride
    2, needs no padding and leaves the last row of an even image unread: there the
    image and its padding before are longer than that, and set the size.)

    Output channels in blocks. Real layers have F of 256 and more, and a filter
    (KH, KW, C, F) may not fit beside the window. A third grid axis walks F in blocks
    of block_f (None: all of F; else a multiple of 128, or at least F), the filter in
    (KH, KW, C, block_f) blocks at (0, 0, 0, f), the output in
    (None, block_h, Wo, block_f) blocks at (b, i, 0, f). Put that axis last: the
    window's index map ignores f, so the window stays in VMEM while f moves, and each
    input row is still fetched at most ceil(KH / block_h) + 1 times.

    Check the arguments (ValueError naming the argument): x float [B, H, W, C]; w
    [KH, KW, C, F] with x's C and dtype; stride and block_h positive ints; block_f
    None, at least F, or a multiple of 128.
    """
    raise NotImplementedError
