"""Matmul: tiles, an f32 accumulator and block sizes — reference solutions.

Same functions and signatures as exercises/matmul.py. Learners see these
through `pytest --hint=3`, so they are written as code worth copying.
"""
import functools
import itertools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


# 1. matmul.one_block — one block, no grid -----------------------------------

def one_block_kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...])


def matmul_one_block(a, b):
    (M, K), (K_b, N) = a.shape, b.shape
    if K != K_b:
        raise ValueError(f"matmul_one_block: a is [M, K] = {a.shape} and b is [K, N] = "
                         f"{b.shape}: their K must agree")
    return pl.pallas_call(
        one_block_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), a.dtype),   # [M, N], not a's [M, K]
    )(a, b)


# 2. matmul.k_accumulate — a K grid axis and an f32 accumulator --------------

def matmul_kernel(a_ref, b_ref, o_ref, acc_ref, *, k_axis=2):
    k = pl.program_id(k_axis)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    # preferred_element_type: the MXU hands back f32 sums, even for bf16 blocks.
    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(k_axis) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)   # the only rounding to o's dtype


def matmul_tiled(a, b, *, bm=128, bk=128, bn=128):
    (M, K), (K_b, N) = a.shape, b.shape
    if K != K_b:
        raise ValueError(f"matmul_tiled: a is [M, K] = {a.shape} and b is [K, N] = "
                         f"{b.shape}: their K must agree")
    if K % bk:
        raise ValueError(f"matmul_tiled: bk={bk} must divide K={K} (a partial K block "
                         "would add garbage to every sum; matmul() pads K for you)")
    return pl.pallas_call(
        matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), a.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), K // bk),        # K last: the reduction
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),     # row block i of a, step k
            pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),     # step k of b, column block j
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),  # same tile for every k
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],     # the running sum, f32
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a, b)


# 3. matmul.mixed_precision — bf16 in, f32 accumulate, bf16 out: matmul() ----

def matmul(a, b, *, bm=128, bk=128, bn=128):
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: expected a [M, K] and b [K, N], got {a.shape} and {b.shape}")
    if a.dtype != b.dtype:
        raise TypeError(f"matmul: a is {a.dtype} but b is {b.dtype}; cast one of them")
    for name, block in (("bm", bm), ("bk", bk), ("bn", bn)):
        if not isinstance(block, (int, jnp.integer)) or block < 1:
            raise ValueError(f"matmul: {name}={block!r} must be a positive int")
    bm, bk, bn = int(bm), int(bk), int(bn)
    (M, K), (_, N) = a.shape, b.shape

    def fit(block, dim, align):
        """A TPU-legal block for a dim: the whole dim, or a multiple of align below it."""
        block = max(align, block // align * align)
        return dim if block >= dim else block

    sublanes = max(8, 32 // jnp.dtype(a.dtype).itemsize)   # rows per vreg: f32 8, bf16 16
    bm, bk, bn = fit(bm, M, sublanes), fit(bk, K, 128), fit(bn, N, 128)
    if K % bk:
        # Past the end of K a block holds garbage, and garbage along K reaches every
        # output. Zeros add nothing to a dot product. (jnp.pad copies a and b once.)
        pad = pl.cdiv(K, bk) * bk - K
        a = jnp.pad(a, ((0, 0), (0, pad)))
        b = jnp.pad(b, ((0, pad), (0, 0)))
    return matmul_tiled(a, b, bm=bm, bk=bk, bn=bn)


# 4. matmul.batched — a squeezed batch dim ------------------------------------

def batched_matmul(a, b, *, bm=128, bk=128, bn=128):
    (B, M, K), (B_b, K_b, N) = a.shape, b.shape
    if B != B_b or K != K_b:
        raise ValueError(f"batched_matmul: expected a [B, M, K] and b [B, K, N], "
                         f"got {a.shape} and {b.shape}")
    if K % bk:
        raise ValueError(f"batched_matmul: bk={bk} must divide K={K}")
    return pl.pallas_call(
        functools.partial(matmul_kernel, k_axis=3),   # puzzle 2's kernel; K is axis 3 now
        out_shape=jax.ShapeDtypeStruct((B, M, N), a.dtype),
        grid=(B, pl.cdiv(M, bm), pl.cdiv(N, bn), K // bk),
        in_specs=[
            # None squeezes the batch dim away: the kernel sees 2-D blocks.
            pl.BlockSpec((None, bm, bk), lambda batch, i, j, k: (batch, i, k)),
            pl.BlockSpec((None, bk, bn), lambda batch, i, j, k: (batch, k, j)),
        ],
        out_specs=pl.BlockSpec((None, bm, bn), lambda batch, i, j, k: (batch, i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(a, b)


# 5. matmul.epilogue — bias + GELU fused at the last K step ------------------

def matmul_bias_gelu_kernel(a_ref, b_ref, bias_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def epilogue():   # once per tile, on the finished f32 sum, before the only store
        y = acc_ref[...] + bias_ref[...].astype(jnp.float32)   # (bm, bn) + (1, bn)
        o_ref[...] = jax.nn.gelu(y).astype(o_ref.dtype)


def matmul_bias_gelu(a, b, bias, *, bm=128, bk=128, bn=128):
    (M, K), (K_b, N) = a.shape, b.shape
    if K != K_b or bias.shape != (N,):
        raise ValueError(f"matmul_bias_gelu: expected a [M, K], b [K, N], bias [N], got "
                         f"{a.shape}, {b.shape}, {bias.shape}")
    if K % bk:
        raise ValueError(f"matmul_bias_gelu: bk={bk} must divide K={K}")
    return pl.pallas_call(
        matmul_bias_gelu_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), a.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), K // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
            pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
            pl.BlockSpec((1, bn), lambda i, j, k: (0, j)),   # the bias follows the columns
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a, b, bias.reshape(1, N))


# 6. matmul.choose_blocks — block sizes under a VMEM budget -------------------

def choose_blocks(M, K, N, *, itemsize, vmem_bytes):
    sublanes = max(8, 32 // itemsize)   # rows per vreg: f32 8, bf16 16, int8 32

    def legal(dim, align):
        """Blocks that divide dim and are a multiple of align, or the whole dim."""
        return [b for b in range(1, dim + 1) if dim % b == 0 and (b % align == 0 or b == dim)]

    def vmem(bm, bk, bn):
        # a, b and o blocks double-buffered by the pipeline, plus the f32 accumulator.
        return 2 * itemsize * (bm * bk + bk * bn + bm * bn) + 4 * bm * bn

    def hbm(bm, bk, bn):
        a_reads = 1 if bk == K else N // bn               # a stays put across j if bk == K
        b_reads = 1 if bk == K and bn == N else M // bm   # b stays put only if one block
        return itemsize * (M * K * a_reads + K * N * b_reads + M * N)

    def steps(bm, bk, bn):
        return (M // bm) * (K // bk) * (N // bn)

    fitting = [blocks for blocks in itertools.product(legal(M, sublanes), legal(K, 128),
                                                      legal(N, 128))
               if vmem(*blocks) <= vmem_bytes]
    if not fitting:
        raise ValueError(f"choose_blocks: no legal blocks for M={M} K={K} N={N} fit in "
                         f"vmem_bytes={vmem_bytes}")
    # Fewest bytes moved; on a tie, fewest grid steps (each step has a fixed cost).
    return min(fitting, key=lambda blocks: (hbm(*blocks), steps(*blocks)))
