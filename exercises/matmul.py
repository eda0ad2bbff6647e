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

    a_ref (bm, bk): this tile's rows of a, this step's slice of K;
    b_ref (bk, bn): this step's slice of K, this tile's columns of b;
    o_ref (bm, bn): the output tile;  acc_ref (bm, bn) float32: a scratch.
    k_axis: the grid axis that walks K (2 in the (i, j, k) grid; puzzle 4 puts
    a batch axis in front and binds another value). Never hard-code the axis:
    ask pl.program_id for the step along k_axis.

    The grid visits all k steps of one tile one after another, so the tile's
    sum can live in VMEM while they run:

        first k step:   acc = 0;  acc += a[i, 0] @ b[0, j]
        next k step:              acc += a[i, 1] @ b[1, j]
        ...
        last k step:              acc += a[i, last] @ b[last, j];  o = acc

    Each phase that does not run at every step is a conditional block
    (@pl.when, as in basics.row_sum). New here: pl.num_programs(axis), the
    number of grid steps along an axis, a traced int like pl.program_id(axis);
    with it the kernel can tell which step is its last.

    Why a scratch and not o_ref? basics.row_sum summed straight into its
    output block, and for an f32 output that works. But outputs are often
    bf16, and a bf16 running sum loses its low bits as it grows (puzzle 3
    shows how much). A scratch is VMEM the kernel owns: pallas_call allocates
    it (scratch_shapes), passes it after the outputs, keeps its contents from
    one grid step to the next, and never copies it to or from HBM. Keep the
    sum in acc_ref, float32, and write o_ref once, when the sum is complete,
    converted to the output's dtype.

    New here too: what the dot returns. jnp.dot of two bf16 blocks returns bf16
    unless you ask otherwise, and a TPU's MXU always adds up a matmul in 32
    bits: jnp.dot(x, y, preferred_element_type=jnp.float32) asks for those f32
    sums as they are (no kernel that asks the MXU for bf16 partial sums even
    compiles for a TPU). One of the tests runs bf16 inputs.

    Interpret mode fills the scratch with NaN: zero it before the first add.
    """
    raise NotImplementedError


def matmul_tiled(a, b, *, bm=128, bk=128, bn=128):
    """a @ b for a [M, K] and b [K, N], tile by tile: bk must divide K.

    The grid has three axes, (i, j, k): one step per row block, per column
    block and per K block, K last. The last axis moves fastest, so all k
    steps of one output tile run back to back.

        step:  (0,0,0) (0,0,1) (0,0,2) │ (0,1,0) (0,1,1) (0,1,2) │ (1,0,0) ...
               └─ output tile (0,0) ─┘   └─ output tile (0,1) ─┘
               zero                      zero
               add     add     add       add     add     add
                               store                     store

    Three BlockSpecs: a in (bm, bk) blocks, b in (bk, bn) blocks, the output
    in (bm, bn) tiles. Each index map receives all three grid indices
    (i, j, k) and uses the ones its array depends on. Read them off the
    chapter's picture: at step (i, j, k), which block of a and which block
    of b make up the k-th term of o[i, j]? And which output tile is being
    summed? It must stay the same while k runs: then Pallas keeps that tile
    in VMEM and writes it to HBM once, when (i, j) moves on.

    New here:

        scratch_shapes=[pltpu.VMEM(shape, dtype), ...]
            # one VMEM buffer per entry, allocated by pallas_call and passed
            # to the kernel after the outputs: here matmul_kernel's acc_ref
        compiler_params=pltpu.CompilerParams(dimension_semantics=(...))
            # as in basics.row_sum, one string per grid axis: "parallel" where
            # the steps are independent, "arbitrary" where they depend on one
            # another (here through acc_ref)

    M and N need not be multiples of bm and bn: round those grid axes up
    (pl.cdiv). Rows of a past M only produce output rows past M, which Pallas
    drops. K is different (see puzzle 3): here bk divides K.
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

       matmul_kernel from puzzle 2 already follows it:
       - jnp.dot(x, y, preferred_element_type=jnp.float32) asks the MXU for
         its f32 sums. Without it, jnp.dot of two bf16 blocks returns bf16:
         interpret mode rounds every k step's product before you add it, and
         the TPU compiler refuses the kernel outright;
       - acc_ref stays float32, whatever the inputs;
       - the only rounding to the output's dtype is the final store.

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

    One more grid axis, in front of (i, j, k): one step per batch, K still
    last. Every BlockSpec gains a batch dim, and here is the trick: a None in
    a block shape means "one element along this dim, and squeeze it away".
    The kernel then sees exactly the 2-D blocks of puzzle 2:

        pl.BlockSpec((None, rows, cols), index_map)
        #             ^ block size 1 along dim 0, removed inside the kernel
        # the index map receives every grid index and still returns one
        # block index per *array* dim, the squeezed one included

              a [B, M, K]                       kernel sees
        batch 0 ┌──────┬──────┐
                │block │      │ ── (None, bm, bk) ──▶  a_ref (bm, bk)
                └──────┴──────┘
        batch 1 ┌──────┬──────┐
                │      │      │
                └──────┴──────┘

    So the kernel body does not change at all: it is matmul_kernel, reused as
    it is! Only its k_axis moves, because the batch axis pushed K one place
    further back; bind the new value with functools.partial. The scratch
    stays (bm, bn). The batch axis is independent work, like i and j.
    """
    raise NotImplementedError


# 5. matmul.epilogue — bias + GELU fused at the last K step ------------------

def matmul_bias_gelu_kernel(a_ref, b_ref, bias_ref, o_ref, acc_ref):
    """matmul_kernel's sum, then gelu(sum + bias) at the last k step.

    a_ref (bm, bk), b_ref (bk, bn), bias_ref (1, bn), o_ref (bm, bn),
    acc_ref (bm, bn) float32. K is grid axis 2.

        first k step:  acc = 0
        every k step:  acc += a_ref @ b_ref         (as matmul_kernel)
        last k step:   o = gelu(acc + bias)         the epilogue, once per tile

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

    The call is matmul_tiled's, with one more input: the bias, as a (1, N)
    array in (1, bn) blocks. Every output tile (i, j) needs the bias of its
    own columns, whatever its rows and whatever the K step: which grid index
    must the bias's index map follow? (basics.outer_add asked the same of y.)
    """
    raise NotImplementedError


# 6. matmul.choose_blocks — block sizes under a VMEM budget -------------------

def choose_blocks(M, K, N, *, itemsize, vmem_bytes):
    """The (bm, bk, bn) for matmul_tiled that moves the fewest bytes and fits in VMEM.

    itemsize: bytes per element of a, b and the output (4 for f32, 2 for bf16).
    vmem_bytes: the VMEM the kernel's buffers may use.

    Why block size is the whole game. Walk matmul_tiled's grid (i, j, k), K
    last: each step needs a (bm, bk) block of a and a (bk, bn) block of b,
    and the pipeline copies a block from HBM whenever its block index differs
    from the previous step's. Count what that costs over the whole grid: how
    many times does all of a pass from HBM into VMEM? All of b? (Each output
    tile is written once.) You will find that bigger bm and bn mean fewer
    bytes, while the MXU does 2*M*K*N flops whatever the blocks. Flops per
    byte, the arithmetic intensity, is what the blocks decide. A TPU v5e does
    ~240 bf16 flops in the time HBM delivers one byte, so with small blocks
    the MXU sits waiting.

    bk barely enters the count: it mostly costs VMEM. But look again at
    consecutive steps when a single K block covers all of K: as j moves, does
    a's block index still change? And b's, if in addition there is a single
    column block? A block whose index stays put is not fetched again.

        moved bytes = itemsize * (elements of a * times a is read
                                  + elements of b * times b is read
                                  + elements of the output)

    The rules for a legal choice:
    - bm divides M and is a multiple of the rows in one vreg tile (8 for
      4-byte items, 16 for 2-byte, 32 for 1-byte), or bm == M;
    - bk divides K and is a multiple of 128, or bk == K;
    - bn divides N and is a multiple of 128, or bn == N;
    - VMEM used <= vmem_bytes, counted as Pallas uses it: every block of a, b
      and the output is double-buffered (two copies: one in use, the next
      arriving), plus the accumulator, a single (bm, bn) float32 buffer.

    There are few legal blocks (divisors of each dim), so trying them all is
    a fine algorithm (itertools.product). Among choices that move equally
    few bytes, any will do (fewer, larger grid steps are a little faster on
    hardware). The tests also run your blocks in matmul_tiled (puzzle 2) and
    count the bytes it really moves: they must be what your model said.
    """
    raise NotImplementedError
