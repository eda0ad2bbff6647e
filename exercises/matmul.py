"""Matmul: tiles, an f32 accumulator and block sizes.

Run `pytest exercises/test_matmul.py` after every edit; add `-k <puzzle>` for
one puzzle and `--hint` when stuck. Replace each `raise NotImplementedError`
with your code; keep the signatures.

The mental model of this chapter
--------------------------------
A TPU core multiplies matrices on its MXU, a 128 x 128 grid of multiply-add
units (256 x 256 on newer chips) that works through a whole block of a matmul
at once. It is so fast that the hard part of a matmul is not the arithmetic
but feeding it: every number must come from HBM into VMEM first, and HBM is
slow next to the MXU. A good matmul kernel is a plan for moving blocks.

The plan is the one you would use by hand. Cut a [M, K] and b [K, N] into
blocks; the output tile (i, j) is a sum over the K blocks:

                               b [K, N]
                          ┌────────┬────────┐
                          │ (0, 0) │ (0, 1) │  k = 0
                          ├────────┼────────┤
                          │ (1, 0) │ (1, 1) │  k = 1
                          ├────────┼────────┤
                          │ (2, 0) │ (2, 1) │  k = 2
                          └────────┴────────┘
          a [M, K]                 o [M, N]
    ┌────────┬────────┬────────┐ ┌────────┬────────┐
    │ (0, 0) │ (0, 1) │ (0, 2) │ │ (0, 0) │ (0, 1) │
    ├────────┼────────┼────────┤ ├────────┼────────┤
    │ (1, 0) │ (1, 1) │ (1, 2) │ │ (1, 0) │ (1, 1) │
    └────────┴────────┴────────┘ └────────┴────────┘

    o[i, j] = a[i, 0] @ b[0, j]  +  a[i, 1] @ b[1, j]  +  a[i, 2] @ b[2, j]

Everything in this chapter is that sum: where the running total lives
(puzzle 2), in which precision (3), with a batch dim (4), what happens to the
total before it is stored (5), and how big the blocks should be (6).

Dimension letters: M rows of a and of the output, K the summed dim, N columns
of b and of the output, B batch; bm, bk, bn the block sizes along M, K, N.
The tests run your kernels on CPU in Pallas's TPU interpret mode, which fills
fresh buffers with NaN, so a forgotten initialisation shows up.

The public function of this chapter is `matmul(a, b, *, bm, bk, bn)`
(puzzle 3): any shape, f32 or bf16, accumulated in f32.
"""
import functools
import itertools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


# 1. matmul.one_block — one block, no grid -----------------------------------

def one_block_kernel(a_ref, b_ref, o_ref):
    """Store a @ b into o_ref: a_ref [M, K], b_ref [K, N], o_ref [M, N].

    Inside a kernel, jnp.dot(x, y) multiplies two values read from refs, and
    on a TPU it runs on the MXU. Read each ref with [...], multiply, store.
    """
    raise NotImplementedError


def matmul_one_block(a, b):
    """a @ b for a [M, K] and b [K, N], computed by one_block_kernel in one piece.

    With no grid, pl.pallas_call copies the whole of a and b into VMEM, runs
    the kernel once and copies the whole output back, as in basics.add_one.
    That is fine while everything fits in VMEM (tens of MiB); the next puzzle
    removes the limit.

    What is new: the output is not shaped like an input. out_shape says so:
    a [M, K] @ b [K, N] is [M, N], in a's dtype.
    """
    raise NotImplementedError


# 2. matmul.k_accumulate — a K grid axis and an f32 accumulator --------------

def matmul_kernel(a_ref, b_ref, o_ref, acc_ref, *, k_axis=2):
    """Add a_ref @ b_ref to the running sum of this output tile; store it at the end.

    a_ref (bm, bk): block (i, k) of a;  b_ref (bk, bn): block (k, j) of b;
    o_ref (bm, bn): output tile (i, j);  acc_ref (bm, bn) float32: a scratch.
    k_axis: the grid axis that walks K (2 in the (i, j, k) grid; puzzle 4 puts
    a batch axis in front and binds k_axis=3). Read k = pl.program_id(k_axis).

    The grid visits all k steps of one tile one after another, so the tile's
    sum can live in VMEM while they run:

        k = 0:       acc = 0;  acc += a[i, 0] @ b[0, j]
        k = 1:                 acc += a[i, 1] @ b[1, j]
        k = nk - 1:            acc += a[i, nk-1] @ b[nk-1, j];  o = acc

    with nk = pl.num_programs(k_axis), the number of k steps. Each phase is a
    conditional block, as in basics.row_sum:

        @pl.when(k == 0)
        def start_tile():
            ...

    Why a scratch and not o_ref? basics.row_sum summed straight into its
    output block, and for an f32 output that works. But outputs are often
    bf16, and a bf16 running sum loses its low bits as it grows (puzzle 3
    shows how much). A scratch is VMEM the kernel owns: pallas_call allocates
    it (scratch_shapes), passes it after the outputs, keeps its contents from
    one grid step to the next, and never copies it to or from HBM. Keep the
    sum in acc_ref, float32, and store it once, cast to the output's dtype:
    o_ref[...] = acc_ref[...].astype(o_ref.dtype).

    Interpret mode fills the scratch with NaN: zero it before the first add.
    """
    raise NotImplementedError


def matmul_tiled(a, b, *, bm=128, bk=128, bn=128):
    """a @ b for a [M, K] and b [K, N], tile by tile: bk must divide K.

    The grid has three axes, (i, j, k) = (M/bm, N/bn, K/bk), K last: the last
    axis moves fastest, so all k steps of one output tile run back to back.

        step:  (0,0,0) (0,0,1) (0,0,2) │ (0,1,0) (0,1,1) (0,1,2) │ (1,0,0) ...
               └─ output tile (0,0) ─┘   └─ output tile (0,1) ─┘
               zero                      zero
               add     add     add       add     add     add
                               store                     store

    Three BlockSpecs, one index map each (the maps take (i, j, k)):

        a: block (bm, bk) at (i, k)    row block i, K step k
        b: block (bk, bn) at (k, j)    K step k, column block j
        o: block (bm, bn) at (i, j)    the same tile for every k

    Because o's block index does not change while k runs, Pallas keeps that
    tile in VMEM and writes it to HBM once, when (i, j) moves on.

    The scratch: scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)] gives the
    kernel its acc_ref. And tell the compiler which axes may be split across
    cores: compiler_params=pltpu.CompilerParams(
        dimension_semantics=("parallel", "parallel", "arbitrary"))
    (K is "arbitrary": its steps depend on one another through acc_ref).

    M and N need not be multiples of bm and bn: use pl.cdiv for those grid
    axes. Rows of a past M only produce output rows past M, which Pallas
    drops. K is different (see puzzle 3).
    """
    raise NotImplementedError


# 3. matmul.mixed_precision — bf16 in, f32 accumulate, bf16 out: matmul() ----

def matmul(a, b, *, bm=128, bk=128, bn=128):
    """a @ b for a [M, K], b [K, N] of any sizes, f32 or bf16: returns a's dtype.

    This is the chapter's public matmul. Two lessons make it production-ready.

    1. Precision. Models store weights and activations in bf16: half the
       bytes of f32, so half the HBM traffic, and the MXU multiplies bf16
       natively. But bf16 keeps only 8 significant bits: 256 + 1 is 256 in
       bf16. A running sum over K in bf16 drops the low bits of every term
       once it has grown, and the error grows with K. The recipe on TPUs:

           bf16 in  ->  MXU products in f32  ->  sum in f32  ->  bf16 out, once

       Come back to matmul_kernel for it:
       - jnp.dot(x, y, preferred_element_type=jnp.float32) asks the MXU for
         f32 results. Without it, jnp.dot of two bf16 blocks returns bf16: on a
         TPU every k step's product is rounded before you add it.
       - acc_ref stays float32, whatever the inputs;
       - the only rounding is the store, acc_ref[...].astype(o_ref.dtype).

    2. Any shape. matmul_tiled needs legal blocks and a bk that divides K:
       - A block dim must be a multiple of the TPU tile or equal the whole dim:
         bk and bn multiples of 128; bm a multiple of 8 rows for f32 and 16
         for bf16 (two bf16 values share one 32-bit slot, so a vreg holds 16
         rows). When the array is smaller than the block, use the whole dim.
       - M and N need nothing more (rows and columns past the end are dropped).
         K does: past the end of K a block holds garbage, and garbage along K
         lands in every output. Pad a's columns and b's rows with zeros up to
         a multiple of bk (jnp.pad): zeros add nothing to a dot product.

           a [M, K]             b [K, N]
           ┌──────────┬──┐      ┌──────────┐
           │          │00│      │          │
           └──────────┴──┘      ├──────────┤
            K        pad        │ 00000000 │ pad
                                └──────────┘

    Then call matmul_tiled with the fitted blocks. Round user blocks down to a
    legal size rather than failing: matmul(a, b) must work for any M, K, N >= 1.
    """
    raise NotImplementedError


# 4. matmul.batched — a squeezed batch dim ------------------------------------

def batched_matmul(a, b, *, bm=128, bk=128, bn=128):
    """a @ b for each batch: a [B, M, K], b [B, K, N] -> [B, M, N]; bk divides K.

    One more grid axis, in front: (B, M/bm, N/bn, K/bk), K still last. Every
    BlockSpec gains a batch dim, and here is the trick: a None in a block
    shape means "one element along this dim, and squeeze it away". The kernel
    then sees exactly the 2-D blocks of puzzle 2:

        pl.BlockSpec((None, bm, bk), lambda batch, i, j, k: (batch, i, k))
        #             ^ block size 1 along B, removed inside the kernel
        # the index map still returns one index per array dim, batch first

              a [B, M, K]                       kernel sees
        batch 0 ┌──────┬──────┐
                │(i, k)│      │ ── (None, bm, bk) ──▶  a_ref (bm, bk)
                └──────┴──────┘
        batch 1 ┌──────┬──────┐
                │      │      │
                └──────┴──────┘

    So the kernel body does not change at all: it is matmul_kernel, reused as
    it is! Only its k_axis moves, because K is now grid axis 3; bind it with
    functools.partial(matmul_kernel, k_axis=3). The scratch stays (bm, bn).
    The batch axis is independent work: mark it "parallel", as i and j.
    """
    raise NotImplementedError


# 5. matmul.epilogue — bias + GELU fused at the last K step ------------------

def matmul_bias_gelu_kernel(a_ref, b_ref, bias_ref, o_ref, acc_ref):
    """matmul_kernel's sum, then gelu(sum + bias) at the last k step.

    a_ref (bm, bk), b_ref (bk, bn), bias_ref (1, bn), o_ref (bm, bn),
    acc_ref (bm, bn) float32. K is grid axis 2.

        k = 0:       acc = 0
        every k:     acc += a_ref @ b_ref           (as matmul_kernel)
        k = nk - 1:  o = gelu(acc + bias)           the epilogue, once per tile

    The epilogue runs in f32 on the finished sum: adding the bias at every k
    step would add it nk times. Cast only the final value to o_ref.dtype.
    jax.nn.gelu's default (the tanh approximation) is what the tests expect.
    """
    raise NotImplementedError


def matmul_bias_gelu(a, b, bias, *, bm=128, bk=128, bn=128):
    """gelu(a @ b + bias) for a [M, K], b [K, N], bias [N]; bk divides K.

    Why fuse? A dense layer is a matmul followed by a bias and an activation.
    As three separate ops, the [M, N] result goes to HBM, comes back for the
    bias, goes out again, comes back for the GELU: four extra trips over M*N
    values. Fused, the epilogue costs no memory traffic at all: the tile is
    already in VMEM (in acc_ref) when the sum is done.

    The call is matmul_tiled's, with one more input: the bias, as (1, N),
    with block (1, bn). Every output tile (i, j) needs the bias of its
    columns, so the bias follows j alone: index map (0, j), as y followed the
    columns in basics.outer_add.
    """
    raise NotImplementedError


# 6. matmul.choose_blocks — block sizes under a VMEM budget -------------------

def choose_blocks(M, K, N, *, itemsize, vmem_bytes):
    """The (bm, bk, bn) for matmul_tiled that moves the fewest bytes and fits in VMEM.

    itemsize: bytes per element of a, b and the output (4 for f32, 2 for bf16).
    vmem_bytes: the VMEM the kernel's buffers may use.

    Why block size is the whole game: each (i, j, k) step fetches a (bm, bk)
    block of a and a (bk, bn) block of b. Along the way, all of a is read once
    per column block and all of b once per row block:

        bytes = itemsize * (M*K * N/bn  +  K*N * M/bm  +  M*N)
                            a, N/bn times  b, M/bm times  o once

    while the MXU does 2*M*K*N flops whatever the blocks. Flops per byte, the
    arithmetic intensity, is about 2 / (itemsize * (1/bm + 1/bn)): bigger bm
    and bn, fewer bytes per flop. A TPU v5e does ~240 bf16 flops in the time
    HBM delivers one byte, so with small blocks the MXU sits waiting.

    bk is absent from that formula: it only costs VMEM. One exception: when
    bk == K, a's block index (i, 0) does not change as j moves, so Pallas
    keeps it in VMEM and a is read once. (And when bk == K and bn == N, b's
    single block stays too.) Exactly:

        a_reads = 1 if bk == K else N // bn
        b_reads = 1 if bk == K and bn == N else M // bm

    The rules for a legal choice:
    - bm divides M and is a multiple of max(8, 32 // itemsize) (8 rows for
      f32, 16 for bf16), or bm == M;
    - bk divides K and is a multiple of 128, or bk == K;
    - bn divides N and is a multiple of 128, or bn == N;
    - VMEM used <= vmem_bytes, where Pallas double-buffers every block (one in
      use, the next arriving) and the accumulator is f32:

        vmem = 2 * itemsize * (bm*bk + bk*bn + bm*bn) + 4 * bm*bn

    There are few legal blocks (divisors of each dim), so trying them all is
    a fine algorithm (itertools.product). Among choices that move equally
    few bytes, any will do (fewer, larger grid steps are a little faster on
    hardware). The tests also run your blocks in matmul_tiled (puzzle 2) and
    check with moved_bytes that the model matches what the kernel moves.
    """
    raise NotImplementedError
