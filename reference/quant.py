"""Quantised matmuls and a convolution — reference solutions.

Same functions and signatures as exercises/quant.py. Learners see these
through `pytest --hint=3`, so they are written as code worth copying.

The public API: `quantize_int8`, `int8_matmul`, `int8_weight_matmul`,
`int4_matmul` and `conv2d`, for any sizes (the blocks need not divide them).
Integers cross HBM in their stored width (int8, two 4-bit values per byte) and
become floats only in VMEM; every sum over K runs in a 32-bit accumulator.
"""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _check_array(function, name, x, ndim, kinds, what):
    """ValueError naming ``name`` unless x has ``ndim`` dims and a dtype of ``kinds``."""
    if x.ndim != ndim or not any(jnp.issubdtype(x.dtype, kind) for kind in kinds):
        raise ValueError(f"{function}: {name} must be {what}; got {x.shape} {x.dtype}")


def _check_shape(function, name, x, shape, what):
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{function}: {name} must be {what} = {tuple(shape)}; got {x.shape}")


def _check_block(function, name, block, align):
    if not isinstance(block, int) or block < 1 or block % align:
        raise ValueError(f"{function}: {name}={block!r} must be a positive multiple of {align}")


# 1. quant.quantize — symmetric per-row int8 quantisation ----------------------

def quantize_kernel(x_ref, q_ref, scale_ref):
    x = x_ref[...].astype(jnp.float32)                      # (block_rows, C)
    amax = jnp.max(jnp.abs(x), axis=1, keepdims=True)        # (block_rows, 1)
    # A row of zeros gets scale 1: its q is 0 either way, and nothing divides by 0.
    scale = jnp.where(amax > 0, amax / 127, 1.0)
    q = jnp.clip(jnp.round(x / scale), -127, 127)            # to nearest, never truncated
    q_ref[...] = q.astype(q_ref.dtype)
    scale_ref[...] = scale


def quantize_int8(x, *, block_rows=32):
    _check_array("quantize_int8", "x", x, 2, [jnp.floating], "a float [R, C] array")
    _check_block("quantize_int8", "block_rows", block_rows, 8)
    R, C = x.shape
    rows = pl.BlockSpec((block_rows, C), lambda i: (i, 0))   # whole rows: a row's max needs all of it
    return pl.pallas_call(
        quantize_kernel,
        out_shape=(jax.ShapeDtypeStruct((R, C), jnp.int8),
                   jax.ShapeDtypeStruct((R, 1), jnp.float32)),
        grid=(pl.cdiv(R, block_rows),),
        in_specs=[rows],
        out_specs=(rows, pl.BlockSpec((block_rows, 1), lambda i: (i, 0))),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x)


# 2. quant.int8_dot — int8 x int8 with an int32 accumulator --------------------

def int8_matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    # int8 x int8 on the MXU, every product and sum in int32: exact.
    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.int32)

    @pl.when(k == pl.num_programs(2) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...]


def int8_matmul_int32(a_q, b_q, *, bm=128, bk=128, bn=128):
    _check_array("int8_matmul_int32", "a_q", a_q, 2, [jnp.int8], "int8 [M, K]")
    _check_array("int8_matmul_int32", "b_q", b_q, 2, [jnp.int8], "int8 [K, N]")
    (M, K), (_, N) = a_q.shape, b_q.shape
    _check_shape("int8_matmul_int32", "b_q", b_q, (K, N), "int8 [K, N] with a_q's K")
    if K % bk:
        raise ValueError(f"int8_matmul_int32: bk={bk} must divide K={K}")
    return pl.pallas_call(
        int8_matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), jnp.int32),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), K // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.int32)],      # the running sum, int32
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a_q, b_q)


# 3. quant.dequant — per-row times per-column scales, once, at the last K step --

def int8_dequant_kernel(a_ref, a_scale_ref, b_ref, b_scale_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.int32)

    @pl.when(k == pl.num_programs(2) - 1)
    def dequantize():   # once per tile: a_scale (bm, 1) down the rows, b_scale (1, bn) across
        scale = a_scale_ref[...] * b_scale_ref[...]
        o_ref[...] = (acc_ref[...].astype(jnp.float32) * scale).astype(o_ref.dtype)


def int8_matmul(a_q, a_scale, b_q, b_scale, *, bm=128, bk=128, bn=128):
    name = "int8_matmul"
    _check_array(name, "a_q", a_q, 2, [jnp.int8], "int8 [M, K]")
    _check_array(name, "b_q", b_q, 2, [jnp.int8], "int8 [K, N]")
    (M, K), N = a_q.shape, b_q.shape[1]
    _check_shape(name, "b_q", b_q, (K, N), "int8 [K, N] with a_q's K")
    _check_array(name, "a_scale", a_scale, 2, [jnp.float32], "float32 [M, 1]")
    _check_shape(name, "a_scale", a_scale, (M, 1), "float32 [M, 1]")
    _check_array(name, "b_scale", b_scale, 2, [jnp.float32], "float32 [1, N]")
    _check_shape(name, "b_scale", b_scale, (1, N), "float32 [1, N]")
    _check_block(name, "bm", bm, 32)          # int8 rows: 32 to a vreg tile
    _check_block(name, "bk", bk, 128)
    _check_block(name, "bn", bn, 128)
    # A block as big as its dim is always legal; past the end of K a block would hold
    # garbage, so K is padded with zeros (they add nothing to a dot product).
    bm, bk, bn = min(bm, M), min(bk, K), min(bn, N)
    pad = -K % bk
    a_q = jnp.pad(a_q, ((0, 0), (0, pad)))
    b_q = jnp.pad(b_q, ((0, pad), (0, 0)))
    return pl.pallas_call(
        int8_dequant_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), jnp.float32),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), (K + pad) // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bm, 1), lambda i, j, k: (i, 0)),    # the rows' scales
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
                  pl.BlockSpec((1, bn), lambda i, j, k: (0, j))],   # the columns' scales
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.int32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a_q, a_scale, b_q, b_scale)


# 4. quant.weight_only — float activations, int8 weights dequantised in VMEM ---

def weight_only_kernel(x_ref, w_ref, w_scale_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    x = x_ref[...]
    w = w_ref[...].astype(x.dtype)   # int8 -> x's dtype, in VMEM: exact (|w| <= 127)
    acc_ref[...] += jnp.dot(x, w, preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def dequantize():   # a column's scale factors out of its sum over K: apply it once
        o_ref[...] = (acc_ref[...] * w_scale_ref[...]).astype(o_ref.dtype)


def int8_weight_matmul(x, w_q, w_scale, *, bm=128, bk=128, bn=128):
    name = "int8_weight_matmul"
    _check_array(name, "x", x, 2, [jnp.floating], "float [M, K]")
    _check_array(name, "w_q", w_q, 2, [jnp.int8], "int8 [K, N]")
    (M, K), N = x.shape, w_q.shape[1]
    _check_shape(name, "w_q", w_q, (K, N), "int8 [K, N] with x's K")
    _check_array(name, "w_scale", w_scale, 2, [jnp.float32], "float32 [1, N]")
    _check_shape(name, "w_scale", w_scale, (1, N), "float32 [1, N]")
    _check_block(name, "bm", bm, 16)          # bf16 rows: 16 to a vreg tile
    _check_block(name, "bk", bk, 128)
    _check_block(name, "bn", bn, 128)
    bm, bk, bn = min(bm, M), min(bk, K), min(bn, N)
    pad = -K % bk
    x = jnp.pad(x, ((0, 0), (0, pad)))
    w_q = jnp.pad(w_q, ((0, pad), (0, 0)))    # int8 zeros: still int8 in HBM
    return pl.pallas_call(
        weight_only_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), x.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), (K + pad) // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),    # int8 over HBM
                  pl.BlockSpec((1, bn), lambda i, j, k: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, w_q, w_scale)


# 5. quant.int4 — two 4-bit weights per byte, group scales and zero points -----

def int4_kernel(x_ref, packed_ref, scale_ref, zero_ref, o_ref, acc_ref, w_ref):
    k = pl.program_id(2)   # one group of K rows per step

    @pl.when(k == 0)
    def start_tile():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    packed = packed_ref[...].astype(jnp.int32)            # (group_size // 2, bn)
    low = packed & 0xF                                     # rows 0, 2, 4, ... of the group
    high = jax.lax.shift_right_logical(packed, 4) & 0xF   # rows 1, 3, 5, ...
    scale, zero = scale_ref[...], zero_ref[...]            # (1, bn): this group's
    half = packed.shape[0]
    # Interleave in VMEM: low nibbles to the even rows, high nibbles to the odd rows.
    w_ref[pl.ds(0, half, stride=2), :] = (low.astype(jnp.float32) - zero) * scale
    w_ref[pl.ds(1, half, stride=2), :] = (high.astype(jnp.float32) - zero) * scale
    x = x_ref[...]
    acc_ref[...] += jnp.dot(x, w_ref[...].astype(x.dtype), preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def finish_tile():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def int4_matmul(x, w_packed, scales, zeros, *, group_size=128, bm=128, bn=128):
    name = "int4_matmul"
    _check_array(name, "x", x, 2, [jnp.floating], "float [M, K]")
    (M, K) = x.shape
    _check_array(name, "w_packed", w_packed, 2, [jnp.int8], "int8 [K // 2, N]")
    N = w_packed.shape[1]
    if K % 2 or w_packed.shape[0] * 2 != K:
        raise ValueError(f"{name}: w_packed must be int8 [K // 2, N] for an even K={K}; "
                         f"got {w_packed.shape}")
    if not isinstance(group_size, int) or group_size < 2 or K % group_size or \
            (group_size % 128 and group_size != K):
        raise ValueError(f"{name}: group_size={group_size!r} must divide K={K} and be a "
                         "multiple of 128 (x's blocks are one group wide) or K itself")
    groups = K // group_size
    for what, array in (("scales", scales), ("zeros", zeros)):
        _check_array(name, what, array, 2, [jnp.float32], "float32 [K // group_size, N]")
        _check_shape(name, what, array, (groups, N), "float32 [K // group_size, N]")
    _check_block(name, "bm", bm, 16)
    _check_block(name, "bn", bn, 128)
    bm, bn = min(bm, M), min(bn, N)
    # One group per K step. A (1, bn) block of a [groups, N] array breaks the (8, 128)
    # rule, so the scales and zeros travel as [groups, 1, N]: (1, bn) blocks of whole dims.
    group_row = pl.BlockSpec((None, 1, bn), lambda i, j, k: (k, 0, j))
    return pl.pallas_call(
        int4_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), x.dtype),
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn), groups),
        in_specs=[pl.BlockSpec((bm, group_size), lambda i, j, k: (i, k)),
                  pl.BlockSpec((group_size // 2, bn), lambda i, j, k: (k, j)),  # packed bytes
                  group_row, group_row],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32),            # the running sum
                        pltpu.VMEM((group_size, bn), jnp.float32)],   # one group, unpacked
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, w_packed, scales.reshape(groups, 1, N), zeros.reshape(groups, 1, N))


# 6. quant.halo — a tile of output rows from its input rows, halo included -----

def conv_kernel(x_ref, w_ref, o_ref, *, stride=1):
    KH, KW = w_ref.shape[:2]
    block_h, Wo = o_ref.shape[:2]
    acc = jnp.zeros(o_ref.shape, jnp.float32)
    for kh in range(KH):          # one matmul per tap, over the whole tile
        for kw in range(KW):
            # Output (r, c) reads input (r * stride + kh, c * stride + kw) of the window.
            patch = x_ref[pl.ds(kh, block_h, stride=stride), pl.ds(kw, Wo, stride=stride), :]
            acc += jnp.einsum("hwc,cf->hwf", patch, w_ref[kh, kw],
                              preferred_element_type=jnp.float32)
    o_ref[...] = acc.astype(o_ref.dtype)


def same_padding(size, k, stride):
    """PROVIDED: (output size, padding before, padding after) of XLA's SAME padding for
    one spatial dim of ``size`` and a filter of ``k`` taps at ``stride``."""
    out = -(-size // stride)
    total = max((out - 1) * stride + k - size, 0)
    return out, total // 2, total - total // 2


def conv2d_rows(x, w, *, block_h=8):
    name = "conv2d_rows"
    _check_array(name, "x", x, 4, [jnp.floating], "float [B, H, W, C]")
    _check_array(name, "w", w, 4, [jnp.floating], "float [KH, KW, C, F]")
    B, H, W, C = x.shape
    KH, KW, _, F = w.shape
    if w.shape[2] != C or w.dtype != x.dtype:
        raise ValueError(f"{name}: w must be [KH, KW, C, F] with x's C={C} and dtype "
                         f"{x.dtype}; got {w.shape} {w.dtype}")
    if not isinstance(block_h, int) or block_h < 1:
        raise ValueError(f"{name}: block_h={block_h!r} must be a positive int")
    top = (KH - 1) // 2
    left = (KW - 1) // 2
    tiles = pl.cdiv(H, block_h)
    window = block_h + KH - 1               # the tile's rows and the KH - 1 rows below them
    Hp = tiles * block_h + KH - 1           # every window inside the padded image
    Wp = W + KW - 1
    x = jnp.pad(x, ((0, 0), (top, Hp - H - top), (left, Wp - W - left), (0, 0)))
    rows = x.reshape(B * Hp, Wp, C)         # one image after another, row by row

    def window_start(b, i):                 # element offsets, not block indices
        return (b * Hp + i * block_h, 0, 0)

    return pl.pallas_call(
        conv_kernel,
        out_shape=jax.ShapeDtypeStruct((B, H, W, F), x.dtype),
        grid=(B, tiles),
        in_specs=[pl.BlockSpec((pl.Element(window), pl.Element(Wp), pl.Element(C)),
                               window_start),
                  pl.BlockSpec((KH, KW, C, F), lambda b, i: (0, 0, 0, 0))],
        out_specs=pl.BlockSpec((None, block_h, W, F), lambda b, i: (b, i, 0, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(rows, w)


# 7. quant.strided — stride 2 and blocked output channels: conv2d() ----------------

def conv2d(x, w, *, stride=1, block_h=8, block_f=None):
    name = "conv2d"
    _check_array(name, "x", x, 4, [jnp.floating], "float [B, H, W, C]")
    _check_array(name, "w", w, 4, [jnp.floating], "float [KH, KW, C, F]")
    B, H, W, C = x.shape
    KH, KW, _, F = w.shape
    if w.shape[2] != C or w.dtype != x.dtype:
        raise ValueError(f"{name}: w must be [KH, KW, C, F] with x's C={C} and dtype "
                         f"{x.dtype}; got {w.shape} {w.dtype}")
    if not isinstance(stride, int) or stride < 1:
        raise ValueError(f"{name}: stride={stride!r} must be a positive int")
    if not isinstance(block_h, int) or block_h < 1:
        raise ValueError(f"{name}: block_h={block_h!r} must be a positive int")
    if block_f is None:
        block_f = F
    _check_block(name, "block_f", block_f, 1 if block_f >= F else 128)
    block_f = min(block_f, F)
    Ho, top, _ = same_padding(H, KH, stride)
    Wo, left, _ = same_padding(W, KW, stride)
    tiles = pl.cdiv(Ho, block_h)
    window = (block_h - 1) * stride + KH    # input rows behind block_h output rows
    # Every window inside the padded image, and the image inside it: a filter smaller than
    # the stride needs no padding, and leaves the last row (column) of an even image unread.
    Hp = max((tiles * block_h - 1) * stride + KH, top + H)
    Wp = max((Wo - 1) * stride + KW, left + W)
    x = jnp.pad(x, ((0, 0), (top, Hp - H - top), (left, Wp - W - left), (0, 0)))
    rows = x.reshape(B * Hp, Wp, C)

    def window_start(b, i, f):   # the same window for every f: it stays in VMEM
        return (b * Hp + i * block_h * stride, 0, 0)

    return pl.pallas_call(
        functools.partial(conv_kernel, stride=stride),
        out_shape=jax.ShapeDtypeStruct((B, Ho, Wo, F), x.dtype),
        grid=(B, tiles, pl.cdiv(F, block_f)),    # output channels last
        in_specs=[pl.BlockSpec((pl.Element(window), pl.Element(Wp), pl.Element(C)),
                               window_start),
                  pl.BlockSpec((KH, KW, C, block_f), lambda b, i, f: (0, 0, 0, f))],
        out_specs=pl.BlockSpec((None, block_h, Wo, block_f), lambda b, i, f: (b, i, 0, f)),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel")),
    )(rows, w)
