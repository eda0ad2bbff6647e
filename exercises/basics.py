"""Basics: grids, BlockSpecs and index maps.

Run `pytest exercises/test_basics.py` after every edit; add `-k <puzzle>` for
one puzzle and `--hint` when stuck. Replace each `raise NotImplementedError`
with your code; keep the signatures.

The mental model of this chapter
--------------------------------
A TPU core computes on data held in VMEM, a small fast scratchpad (tens of
MiB), while your arrays live in HBM, large and slower. A Pallas kernel is a
function of *refs*: views of VMEM buffers. `pl.pallas_call` does the copying
for you: before each run of the kernel it copies the input blocks from HBM
into VMEM, and afterwards copies the output blocks back.

    HBM                 VMEM                   HBM
    x ──copy block──▶  x_ref ─▶ kernel ─▶ o_ref ──copy block──▶ out

Read a ref with `x_ref[...]` (a jax array), write with `o_ref[...] = value`.
The kernel returns nothing: its output is what it stored.

Dimension letters: M rows, D / N columns; bm, bn block sizes.
The tests run your kernels on CPU in Pallas's TPU interpret mode, which fills
fresh buffers with NaN, so a forgotten store or initialisation shows up.
"""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


# 1. basics.add_one — a whole-array kernel ---------------------------------

def add_one_kernel(x_ref, o_ref):
    """Store x + 1 into the output.

    x_ref, o_ref: refs to the whole input and output, shape [M, D].

    Why refs and not arrays? A kernel works on memory: it reads VMEM into
    registers, computes, and writes VMEM back. `x_ref[...]` is that read;
    `o_ref[...] = ...` that write.
    """
    raise NotImplementedError


def add_one(x):
    """x + 1 for x of shape [M, D], computed by add_one_kernel.

    With no grid, pl.pallas_call runs the kernel once on the whole array,
    which must then fit in VMEM. It needs to know the output's shape and
    dtype up front, because the kernel only writes into a buffer that
    already exists:

        pl.pallas_call(
            kernel,                                       # kernel(x_ref, o_ref)
            out_shape=jax.ShapeDtypeStruct(shape, dtype), # the output buffer
        )(x)                                              # the inputs, in order
    """
    raise NotImplementedError


# 2. basics.tiled — a 1-D grid of row blocks --------------------------------

def add_one_tiled(x, *, bm=8):
    """x + 1 again, one block of bm rows at a time: x [M, D] -> [M, D].

    Real arrays do not fit in VMEM, so a kernel works block by block. A
    `grid` runs the kernel once per grid index, and a BlockSpec says which
    block of an array each run sees:

        pl.BlockSpec(block_shape, index_map)
        # block_shape: the shape of one block, here bm full-width rows
        # index_map:   a function of the grid index that returns, for each
        #              dim of the array, a *block* index (Pallas multiplies
        #              it by the block shape), never an element offset

        x (M=32, D)          grid=(4,)           o (M=32, D)
        ┌──────────┐                             ┌──────────┐
        │ block 0  │── i=0 ─▶ add_one_kernel ─▶  │ block 0  │
        │ block 1  │── i=1 ─▶ add_one_kernel ─▶  │ block 1  │
        │ block 2  │── i=2 ─▶      ...           │ block 2  │
        │ block 3  │── i=3 ─▶                    │ block 3  │
        └──────────┘                             └──────────┘

    Pass `grid=(...)`, `in_specs=[...]` (one BlockSpec per input) and
    `out_specs=...` to pl.pallas_call. The kernel body does not change at
    all: reuse add_one_kernel as it is. It never knew how big the array was.

    To write an index map, ask: at grid step i, which block does this array
    hand over, counted in blocks along each of its two dims? Here x and the
    output are cut the same way, so one BlockSpec can serve both.

    M need not be a multiple of bm. The grid then needs a step for the partial
    last block too (pl.cdiv(a, b) is integer division rounded up); Pallas
    drops the writes of that block that fall past the end of the array.
    """
    raise NotImplementedError


# 3. basics.reverse — only the index map changes ----------------------------

def copy_kernel(x_ref, o_ref):
    """PROVIDED: copies its block."""
    o_ref[...] = x_ref[...]


def reverse_blocks(x, *, bm=8):
    """Reverse the order of the row blocks of x [M, D] (M a multiple of bm).

    Rows inside a block keep their order; only whole blocks move:

        x:  [ b0 | b1 | b2 | b3 ]   ->   out: [ b3 | b2 | b1 | b0 ]

    The kernel is copy_kernel: all the work is in the index maps. An index
    map is an ordinary function of the grid index, and nothing forces it to
    return i: the step that writes output block i may read any input block.
    Which input block belongs at output position i? Count from the other end,
    and remember that block indices start at 0. Nothing is computed; where
    the data goes is decided by the index maps alone.
    """
    raise NotImplementedError


# 4. basics.grid_2d — a 2-D grid ---------------------------------------------

def add_kernel(x_ref, y_ref, o_ref):
    """Store x + y. Kernel arguments come in order: inputs, then outputs."""
    raise NotImplementedError


def add_2d(x, y, *, bm=8, bn=128):
    """x + y for x, y [M, N], in (bm, bn) tiles over a 2-D grid.

    A grid may have several axes; the index map then takes one argument per
    axis. Program (i, j) handles tile (i, j):

                 j=0        j=1        j=2
              ┌──────────┬──────────┬──────────┐
        i=0   │ (0, 0)   │ (0, 1)   │ (0, 2)   │   each tile: bm x bn
              ├──────────┼──────────┼──────────┤
        i=1   │ (1, 0)   │ (1, 1)   │ (1, 2)   │
              └──────────┴──────────┴──────────┘

    On a TPU the last two dims of a block must be multiples of (8, 128), or
    equal to the array's own dims: (8, 128) is the shape of one vector
    register tile.
    """
    raise NotImplementedError


# 5. basics.outer_add — an index map per input -------------------------------

def outer_add(x, y, *, bm=8, bn=128):
    """out[m, n] = x[m, 0] + y[0, n] for a column x [M, 1] and a row y [1, N].

    The output is tiled as in grid_2d, but each input follows only one grid
    axis: tile (i, j) needs rows block i of x and column block j of y.

                  y: [ y0 | y1 | y2 ]            (block shape (1, bn))
                ┌────┬──────────────────┐
         x: x0  │    │ x0+y0  x0+y1 ... │        out tile (i, j) = x_i + y_j
            x1  │    │ x1+y0  x1+y1 ... │        (block shape (bm, bn))
                └────┴──────────────────┘
                 (bm, 1)

    The kernel: add_kernel from grid_2d, unchanged! Inside it, a (bm, 1)
    block plus a (1, bn) block broadcasts to (bm, bn), just as in NumPy.
    Only the BlockSpecs are new: one index map per input.
    """
    raise NotImplementedError


# 6. basics.tail — a size that does not divide the block ---------------------

def column_sums_kernel(x_ref, o_ref, *, M):
    """Sum this block's rows of x into o_ref, ignoring rows past the array's end.

    x_ref: (bm, D), block i of x [M, D];  o_ref: (1, D), this block's sums.
    M: the real number of rows (a static Python int, bound by the caller).

    When bm does not divide M, the last block hangs off the end of x:

        rows  0..7    block 0  ✓
        rows  8..15   block 1  ✓
        rows 16..23   block 2  rows 16..19 real, rows 20..23 past the end:
                               garbage (NaN in interpret mode)

    For an elementwise kernel that garbage never matters: its results land
    past the end of the output and are dropped. A sum mixes rows, so here the
    garbage must be masked out first. The kernel only sees its block, so it
    must work out where each of its rows sits in the whole of x, not in the
    block, and keep only the rows that really exist.

    New APIs to build positions inside a kernel:

        pl.program_id(axis)      # this run's index along a grid axis; a traced
                                 # int, only known while the kernel runs
        jax.lax.broadcasted_iota(dtype, shape, dim)
                                 # an array of `shape` that counts 0, 1, 2...
                                 # along `dim` (and is constant along the others)
        x_ref.shape              # the block's own shape: bm is not passed in

    Select with jnp.where(condition, x, 0) rather than multiplying by a 0/1
    mask: on a TPU the garbage can be NaN or Inf, and NaN * 0 is NaN. (On a
    CPU, XLA rewrites a multiply by a converted boolean mask into a select,
    so these tests cannot catch it; a TPU would.) Then sum the rows, keeping
    o_ref's (1, D) shape.
    """
    raise NotImplementedError


def column_sums(x, *, bm=8):
    """PROVIDED: x.sum(axis=0) for x [M, D]: per-block sums, then a final sum.

    The kernel writes one (1, D) row of partial sums per block. Why an
    (n, 1, D) output and not (n, D)? A (1, D) block of an (n, D) array breaks
    the TPU's (8, 128) rule; in a 3-D array the block's last two dims (1, D)
    equal the array's own, which is allowed. `None` in a block shape removes
    that dim inside the kernel, so o_ref is (1, D).
    """
    M, D = x.shape
    n = pl.cdiv(M, bm)
    partial = pl.pallas_call(
        functools.partial(column_sums_kernel, M=M),
        out_shape=jax.ShapeDtypeStruct((n, 1, D), x.dtype),
        grid=(n,),
        in_specs=[pl.BlockSpec((bm, D), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((None, 1, D), lambda i: (i, 0, 0)),
    )(x)
    return partial.sum(axis=(0, 1))


# 7. basics.row_sum — a reduction over a grid axis ---------------------------

def row_sum_kernel(x_ref, o_ref):
    """Accumulate the sum of this (bm, bn) tile's rows into o_ref (bm, 1).

    The grid is (i, j): j walks along a row of tiles, and every j of one i
    writes the *same* output block. Pallas keeps that block in VMEM while its
    index does not change and copies it back to HBM only when it does, so
    o_ref can carry a running sum across the j steps:

        first j step:  o = 0;  o += sum(tile)   (the first step starts the sum)
        next j step:           o += sum(tile)
        last j step:           o += sum(tile)   then o goes back to HBM

    A kernel cannot use a Python `if` on pl.program_id (its value only exists
    when the kernel runs); use a conditional block instead:

        @pl.when(condition)               # condition: a traced bool, built
        def _():                          # from pl.program_id and friends
            ...                           # runs only where the condition holds

    Which grid axis tells you that a row's sum is starting? Every row block
    must start from zero, not only the first one: the output buffer in VMEM
    is reused from one row block to the next, so in interpret mode it holds
    NaN only for the very first block, and afterwards whatever the previous
    block left in it.
    """
    raise NotImplementedError


def row_sum(x, *, bm=8, bn=128):
    """x.sum(axis=1) for x [M, N], tiled (bm, bn), summing over a grid axis.

    Return shape [M]: the kernel writes an (M, 1) array (a (bm, 1) block is
    TPU-legal: 1 equals the array's last dim); drop the last dim after.

    The order of grid axes matters: the reduction axis must come last, so
    that all the steps that add into one output block run one after another.
    Its output BlockSpec must name the same block for all of those steps.

    New here: tell the compiler which grid axes are independent,

        compiler_params=pltpu.CompilerParams(dimension_semantics=(...))
        # one string per grid axis, in grid order:
        #   "parallel":  steps are independent and may be split across cores
        #   "arbitrary": steps must run in order (they share state, such as
        #                a running sum)
    """
    raise NotImplementedError


# 8. basics.bias_gelu — fusion: one pass over memory -------------------------

def bias_gelu_kernel(x_ref, b_ref, o_ref):
    """Store gelu(x + b) for this block: x_ref (bm, D), b_ref (1, D).

    Compute in float32 and round to the output's dtype only at the store:
    bf16 inputs, f32 math, bf16 output (.astype converts). The habit pays
    off wherever values are combined (a sum, a matmul): bf16 keeps 8 bits of
    mantissa and would round after every step; and TPUs before v6 have no
    bf16 vector arithmetic anyway. jax.nn.gelu works inside a kernel (its
    default is the tanh approximation).
    """
    raise NotImplementedError


def bias_gelu(x, b, *, bm=8):
    """gelu(x + b) for x [M, D] and a bias b [D], in one pass over x.

    Why fuse? Written as two ops, x is read, x + b written to HBM, read back
    by gelu and the result written: four trips over M*D values instead of
    two. Most kernels are bound by memory traffic, not arithmetic, so fusion
    is often the whole win.

    Every row block needs the same bias: give b the shape (1, D) and an index
    map that names that one block at every step, whatever i is. Pallas then
    copies it into VMEM once and keeps it there, because its block index
    never changes.
    (Why 2-D? A TPU lays data out in (8, 128) tiles of the last two dims; a
    (1, D) block of a (1, D) array follows the rule "equal to the array's
    dims", and the kernel's (bm, D) + (1, D) broadcasts like NumPy.)

    The efficiency test checks the fusion: x and b read once, the output
    written once, and no work done by JAX ops outside the kernel.
    """
    raise NotImplementedError


# 9. basics.outer_relu_grad — backward of relu(x * y) ------------------------

def outer_relu_dx_kernel(x_ref, y_ref, g_ref, dx_ref):
    """Accumulate dx for row block i over the column blocks j.

    x_ref (bm, 1), y_ref (1, bn), g_ref (bm, bn), dx_ref (bm, 1).
    The forward was out[m, n] = relu(x[m] * y[n]) (an outer product, then
    ReLU), and g is the gradient arriving at out. By the chain rule, x[m]
    collects from every out[m, n] it took part in: g there, times the ReLU's
    slope (it lets gradient through only where its input was positive), times
    the derivative of x[m] * y[n] with respect to x[m].

    One tile holds bn of those terms for each of its bm rows; the column
    blocks j add up over the grid, as in row_sum.
    """
    raise NotImplementedError


def outer_relu_dy_kernel(x_ref, y_ref, g_ref, dy_ref):
    """Accumulate dy for column block j over the row blocks i.

    The mirror image of dx: y[n] collects from every out[m, n], down a
    column instead of along a row; dy_ref (1, bn).

    The grid of this call is (j, i), the reduced axis last as always: mind
    which axis pl.program_id now reads, and that the index maps receive
    (j, i) in that order.
    """
    raise NotImplementedError


def outer_relu_grad(x, y, g, *, bm=8, bn=128):
    """The gradients (dx, dy) of sum(g * relu(x * y)) for x [M, 1], y [1, N], g [M, N].

    Two reductions over two different axes: dx sums along rows of g, dy along
    columns. Each needs its reduction axis last in its grid, so this takes
    two pallas_calls, one per output:

        dx: grid (i, j), j reduced        dy: grid (j, i), i reduced
            out block (bm, 1),                out block (1, bn),
            one per row block                 one per column block

    Everything here you have met: index maps per input (outer_add), an
    accumulator over the last grid axis (row_sum), an elementwise mask (tail)
    computed inside the kernel (bias_gelu's fusion). Return (dx, dy) with the
    shapes of x and y.
    """
    raise NotImplementedError
