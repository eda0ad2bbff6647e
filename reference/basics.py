"""Basics: grids, BlockSpecs and index maps — reference solutions.

Same functions and signatures as exercises/basics.py. Learners see these
through `pytest --hint=3`, so they are written as code worth copying.
"""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


# 1. basics.add_one — a whole-array kernel ---------------------------------

def add_one_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1


def add_one(x):
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    )(x)


# 2. basics.tiled — a 1-D grid of row blocks --------------------------------

def add_one_tiled(x, *, bm=8):
    M, D = x.shape
    rows = pl.BlockSpec((bm, D), lambda i: (i, 0))
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(M, bm),),
        in_specs=[rows],
        out_specs=rows,
    )(x)


# 3. basics.reverse — only the index map changes ----------------------------

def copy_kernel(x_ref, o_ref):
    """PROVIDED: copies its block."""
    o_ref[...] = x_ref[...]


def reverse_blocks(x, *, bm=8):
    M, D = x.shape
    if M % bm:
        raise ValueError(f"reverse_blocks: M={M} must be a multiple of bm={bm}")
    n = M // bm
    return pl.pallas_call(
        copy_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(n,),
        in_specs=[pl.BlockSpec((bm, D), lambda i: (n - 1 - i, 0))],
        out_specs=pl.BlockSpec((bm, D), lambda i: (i, 0)),
    )(x)


# 4. basics.grid_2d — a 2-D grid ---------------------------------------------

def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def add_2d(x, y, *, bm=8, bn=128):
    M, N = x.shape
    tile = pl.BlockSpec((bm, bn), lambda i, j: (i, j))
    return pl.pallas_call(
        add_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn)),
        in_specs=[tile, tile],
        out_specs=tile,
    )(x, y)


# 5. basics.outer_add — an index map per input -------------------------------

def outer_add(x, y, *, bm=8, bn=128):
    (M, _), (_, N) = x.shape, y.shape
    return pl.pallas_call(
        add_kernel,  # the kernel of grid_2d: broadcasting does the rest
        out_shape=jax.ShapeDtypeStruct((M, N), x.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn)),
        in_specs=[
            pl.BlockSpec((bm, 1), lambda i, j: (i, 0)),   # x follows the rows
            pl.BlockSpec((1, bn), lambda i, j: (0, j)),   # y follows the columns
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
    )(x, y)


# 6. basics.tail — a size that does not divide the block ---------------------

def column_sums_kernel(x_ref, o_ref, *, M):
    bm = x_ref.shape[0]
    row = pl.program_id(0) * bm + jax.lax.broadcasted_iota(jnp.int32, x_ref.shape, 0)
    x = jnp.where(row < M, x_ref[...], 0)   # rows past M are garbage: drop them
    o_ref[...] = jnp.sum(x, axis=0, keepdims=True)


def column_sums(x, *, bm=8):
    """PROVIDED: per-block partial sums from the kernel, added up here."""
    M, D = x.shape
    n = pl.cdiv(M, bm)
    partial = pl.pallas_call(
        functools.partial(column_sums_kernel, M=M),
        out_shape=jax.ShapeDtypeStruct((n, 1, D), x.dtype),
        grid=(n,),
        in_specs=[pl.BlockSpec((bm, D), lambda i: (i, 0))],
        # None squeezes the block dim away: the kernel sees o_ref of shape (1, D).
        out_specs=pl.BlockSpec((None, 1, D), lambda i: (i, 0, 0)),
    )(x)
    return partial.sum(axis=(0, 1))


# 7. basics.row_sum — a reduction over a grid axis ---------------------------

def row_sum_kernel(x_ref, o_ref):
    @pl.when(pl.program_id(1) == 0)
    def start_row():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += jnp.sum(x_ref[...], axis=1, keepdims=True)


def row_sum(x, *, bm=8, bn=128):
    M, N = x.shape
    if N % bn:
        raise ValueError(f"row_sum: bn={bn} must divide N={N} (a partial column block "
                         "would add garbage to the sums)")
    out = pl.pallas_call(
        row_sum_kernel,
        out_shape=jax.ShapeDtypeStruct((M, 1), x.dtype),
        grid=(pl.cdiv(M, bm), N // bn),
        in_specs=[pl.BlockSpec((bm, bn), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((bm, 1), lambda i, j: (i, 0)),  # same block for every j
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary")),
    )(x)
    return out[:, 0]


# 8. basics.bias_gelu — fusion: one pass over memory -------------------------

def bias_gelu_kernel(x_ref, b_ref, o_ref):
    x = x_ref[...].astype(jnp.float32) + b_ref[...].astype(jnp.float32)
    o_ref[...] = jax.nn.gelu(x).astype(o_ref.dtype)


def bias_gelu(x, b, *, bm=8):
    M, D = x.shape
    return pl.pallas_call(
        bias_gelu_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(M, bm),),
        in_specs=[
            pl.BlockSpec((bm, D), lambda i: (i, 0)),
            pl.BlockSpec((1, D), lambda i: (0, 0)),  # one bias row, reused by every block
        ],
        out_specs=pl.BlockSpec((bm, D), lambda i: (i, 0)),
    )(x, b.reshape(1, D))


# 9. basics.outer_relu_grad — backward of relu(x * y) ------------------------

def outer_relu_dx_kernel(x_ref, y_ref, g_ref, dx_ref):
    @pl.when(pl.program_id(1) == 0)
    def start_row():
        dx_ref[...] = jnp.zeros_like(dx_ref)

    x, y = x_ref[...], y_ref[...]                   # (bm, 1), (1, bn)
    g = jnp.where(x * y > 0, g_ref[...], 0)         # the ReLU passes gradient where on
    dx_ref[...] += jnp.sum(g * y, axis=1, keepdims=True)


def outer_relu_dy_kernel(x_ref, y_ref, g_ref, dy_ref):
    @pl.when(pl.program_id(1) == 0)
    def start_column():
        dy_ref[...] = jnp.zeros_like(dy_ref)

    x, y = x_ref[...], y_ref[...]
    g = jnp.where(x * y > 0, g_ref[...], 0)
    dy_ref[...] += jnp.sum(g * x, axis=0, keepdims=True)


def outer_relu_grad(x, y, g, *, bm=8, bn=128):
    (M, _), (_, N) = x.shape, y.shape
    if M % bm or N % bn:
        raise ValueError(f"outer_relu_grad: bm={bm} must divide M={M} and bn={bn} N={N} "
                         "(each axis is summed over in one of the two kernels)")
    reduce_last = pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"))
    dx = pl.pallas_call(
        outer_relu_dx_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(M // bm, N // bn),          # (i, j): j is reduced
        in_specs=[pl.BlockSpec((bm, 1), lambda i, j: (i, 0)),
                  pl.BlockSpec((1, bn), lambda i, j: (0, j)),
                  pl.BlockSpec((bm, bn), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((bm, 1), lambda i, j: (i, 0)),
        compiler_params=reduce_last,
    )(x, y, g)
    dy = pl.pallas_call(
        outer_relu_dy_kernel,
        out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype),
        grid=(N // bn, M // bm),          # (j, i): i is reduced
        in_specs=[pl.BlockSpec((bm, 1), lambda j, i: (i, 0)),
                  pl.BlockSpec((1, bn), lambda j, i: (0, j)),
                  pl.BlockSpec((bm, bn), lambda j, i: (i, j))],
        out_specs=pl.BlockSpec((1, bn), lambda j, i: (0, j)),
        compiler_params=reduce_last,
    )(x, y, g)
    return dx, dy
