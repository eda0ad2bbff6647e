"""Softmax and norms — reference solutions.

Same functions and signatures as exercises/norms.py. Learners see these
through `pytest --hint=3`, so they are written as code worth copying.

The chapter's public API: `softmax`, `rms_norm`, `layer_norm` and
`cross_entropy`. Each takes any sizes (blocks that do not divide a dim are
masked in the kernel, never padded in HBM), float32 or bfloat16 in (float32
statistics inside, the input's dtype out; the loss is float32), and is
differentiable with Pallas kernels forward and backward.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


# 1. norms.row_softmax — one row block per grid step, the whole row in VMEM ------

def softmax_rows_kernel(x_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)              # statistics in float32, whatever x is
    m = jnp.max(x, axis=1, keepdims=True)           # exp(x - m) <= 1: nothing overflows
    e = jnp.exp(x - m)
    o_ref[...] = (e / jnp.sum(e, axis=1, keepdims=True)).astype(o_ref.dtype)


def softmax_rows(x, *, block_rows=8):
    R, C = x.shape
    # Rows past R in the last block are garbage, but rows never mix: their results
    # are computed and dropped on the way back to HBM. No mask needed.
    rows = pl.BlockSpec((block_rows, C), lambda i: (i, 0))
    return pl.pallas_call(
        softmax_rows_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(R, block_rows),),
        in_specs=[rows],
        out_specs=rows,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x)


# 2. norms.long_rows — rows too long for VMEM: two passes over column blocks ------

def softmax_long_kernel(x_ref, o_ref, m_scratch, l_scratch, *, C):
    phase, j = pl.program_id(1), pl.program_id(2)
    block_cols = x_ref.shape[1]
    col = j * block_cols + jax.lax.broadcasted_iota(jnp.int32, x_ref.shape, 1)
    # Columns past C in the last block are garbage: -inf takes no weight.
    x = jnp.where(col < C, x_ref[...].astype(jnp.float32), -jnp.inf)

    @pl.when((phase == 0) & (j == 0))
    def start_row_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)

    @pl.when(phase == 0)
    def fold_column_block():   # the running max and sum, as flash's online softmax
        m = m_scratch[...]
        m_new = jnp.maximum(m, jnp.max(x, axis=1, keepdims=True))
        l_scratch[...] = (jnp.exp(m - m_new) * l_scratch[...]
                          + jnp.sum(jnp.exp(x - m_new), axis=1, keepdims=True))
        m_scratch[...] = m_new

    @pl.when(phase == 1)
    def write_column_block():  # the statistics are final: normalise this block
        o_ref[...] = (jnp.exp(x - m_scratch[...]) / l_scratch[...]).astype(o_ref.dtype)


def softmax_long(x, *, block_rows=8, block_cols=128):
    R, C = x.shape

    def out_index_map(i, phase, j):
        # Phase 0 writes nothing: stay on the row's first block, so that no block is
        # written back before phase 1 has filled it.
        return (i, j * phase)

    return pl.pallas_call(
        functools.partial(softmax_long_kernel, C=C),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(R, block_rows), 2, pl.cdiv(C, block_cols)),
        in_specs=[pl.BlockSpec((block_rows, block_cols), lambda i, phase, j: (i, j))],
        out_specs=pl.BlockSpec((block_rows, block_cols), out_index_map),
        scratch_shapes=[pltpu.VMEM((block_rows, 1), jnp.float32),    # m: running max
                        pltpu.VMEM((block_rows, 1), jnp.float32)],   # l: running sum
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary")),
    )(x)


# 3. norms.softmax_grad — the backward as a kernel, and jax.grad -----------------

def softmax_backward_kernel(y_ref, dy_ref, dx_ref, s_scratch, *, C):
    phase, j = pl.program_id(1), pl.program_id(2)
    block_cols = y_ref.shape[1]
    col = j * block_cols + jax.lax.broadcasted_iota(jnp.int32, y_ref.shape, 1)
    y = y_ref[...].astype(jnp.float32)
    dy = dy_ref[...].astype(jnp.float32)

    @pl.when((phase == 0) & (j == 0))
    def start_row_block():
        s_scratch[...] = jnp.zeros_like(s_scratch)

    @pl.when(phase == 0)
    def accumulate():          # s = sum over the row of dy * y (garbage columns dropped)
        s_scratch[...] += jnp.sum(jnp.where(col < C, dy * y, 0.0), axis=1, keepdims=True)

    @pl.when(phase == 1)
    def write_column_block():
        dx_ref[...] = (y * (dy - s_scratch[...])).astype(dx_ref.dtype)


def softmax_backward(y, dy, *, block_rows=8, block_cols=None):
    R, C = y.shape
    block_cols = C if block_cols is None else block_cols   # one column block: the whole row

    def dx_index_map(i, phase, j):
        return (i, j * phase)

    blocks = pl.BlockSpec((block_rows, block_cols), lambda i, phase, j: (i, j))
    return pl.pallas_call(
        functools.partial(softmax_backward_kernel, C=C),
        out_shape=jax.ShapeDtypeStruct(dy.shape, dy.dtype),
        grid=(pl.cdiv(R, block_rows), 2, pl.cdiv(C, block_cols)),
        in_specs=[blocks, blocks],
        out_specs=pl.BlockSpec((block_rows, block_cols), dx_index_map),
        scratch_shapes=[pltpu.VMEM((block_rows, 1), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary")),
    )(y, dy)


def softmax(x, *, block_rows=16, block_cols=None):
    """Softmax over the last axis of x [R, C], with Pallas TPU kernels forward and back.

    block_rows: rows per block, a positive multiple of 8 (shrinks to R when larger).
    block_cols: None keeps whole rows in VMEM (one pass); a positive multiple of 128
        walks each row in column blocks (two passes), for rows too long for VMEM.

    Returns softmax(x) in x's dtype (float32 statistics inside); differentiable: the
    backward reads only the output y and the cotangent dy.
    """
    if x.ndim != 2 or not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"softmax: x must be a 2-D floating array [R, C]; got shape "
                         f"{x.shape} and dtype {x.dtype}")
    _check_block("softmax", "block_rows", block_rows, 8)
    if block_cols is not None:
        _check_block("softmax", "block_cols", block_cols, 128)
    R, C = x.shape
    block_rows = min(block_rows, R)
    block_cols = None if block_cols is None else min(block_cols, C)

    @jax.custom_vjp
    def probabilities(x):
        if block_cols is None:
            return softmax_rows(x, block_rows=block_rows)
        return softmax_long(x, block_rows=block_rows, block_cols=block_cols)

    def probabilities_forward(x):
        y = probabilities(x)
        return y, y                  # the residual: y itself, not x

    def probabilities_backward(y, dy):
        return (softmax_backward(y, dy, block_rows=block_rows, block_cols=block_cols),)

    probabilities.defvjp(probabilities_forward, probabilities_backward)
    return probabilities(x)


# 4. norms.rms_forward — RMSNorm, and the residual the backward needs -----------

def rms_norm_forward_kernel(x_ref, scale_ref, y_ref, inv_rms_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    inv_rms = jax.lax.rsqrt(jnp.mean(x * x, axis=1, keepdims=True) + eps)   # (rows, 1)
    y_ref[...] = (x * inv_rms * scale_ref[...].astype(jnp.float32)).astype(y_ref.dtype)
    inv_rms_ref[...] = inv_rms     # one float per row: all the backward needs besides x


def rms_norm_forward(x, scale, *, eps=1e-6, block_rows=8):
    R, D = x.shape
    rows = pl.BlockSpec((block_rows, D), lambda i: (i, 0))
    return pl.pallas_call(
        functools.partial(rms_norm_forward_kernel, eps=eps),
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype),
                   jax.ShapeDtypeStruct((R, 1), jnp.float32)],
        grid=(pl.cdiv(R, block_rows),),
        in_specs=[rows, pl.BlockSpec((1, D), lambda i: (0, 0))],   # scale: fetched once
        out_specs=[rows, pl.BlockSpec((block_rows, 1), lambda i: (i, 0))],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, scale.reshape(1, D))


# 5. norms.rms_backward — dx per row block, dscale summed over all of them --------

def rms_norm_backward_kernel(x_ref, scale_ref, inv_rms_ref, dy_ref, dx_ref, dscale_ref,
                             dscale_scratch, *, R):
    i = pl.program_id(0)
    block_rows = x_ref.shape[0]

    @pl.when(i == 0)
    def start():
        dscale_scratch[...] = jnp.zeros_like(dscale_scratch)

    inv_rms = inv_rms_ref[...]
    x_hat = x_ref[...].astype(jnp.float32) * inv_rms          # recomputed, never stored
    dy = dy_ref[...].astype(jnp.float32)
    g = dy * scale_ref[...].astype(jnp.float32)
    dx = inv_rms * (g - x_hat * jnp.mean(g * x_hat, axis=1, keepdims=True))
    dx_ref[...] = dx.astype(dx_ref.dtype)
    # Rows past R in the last block are garbage, and dscale sums over rows: drop them.
    row = i * block_rows + jax.lax.broadcasted_iota(jnp.int32, (block_rows, 1), 0)
    dscale_scratch[...] += jnp.sum(jnp.where(row < R, dy * x_hat, 0.0), axis=0,
                                   keepdims=True)

    @pl.when(i == pl.num_programs(0) - 1)
    def finish():
        dscale_ref[...] = dscale_scratch[...].astype(dscale_ref.dtype)


def rms_norm_backward(x, scale, inv_rms, dy, *, block_rows=8):
    R, D = x.shape
    rows = pl.BlockSpec((block_rows, D), lambda i: (i, 0))
    whole = pl.BlockSpec((1, D), lambda i: (0, 0))   # the same block at every step
    dx, dscale = pl.pallas_call(
        functools.partial(rms_norm_backward_kernel, R=R),
        out_shape=[jax.ShapeDtypeStruct(x.shape, dy.dtype),
                   jax.ShapeDtypeStruct((1, D), scale.dtype)],
        grid=(pl.cdiv(R, block_rows),),
        in_specs=[rows, whole, pl.BlockSpec((block_rows, 1), lambda i: (i, 0)), rows],
        out_specs=[rows, whole],
        scratch_shapes=[pltpu.VMEM((1, D), jnp.float32)],
        # dscale sums over the row blocks: the axis runs in order, on one core.
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
    )(x, scale.reshape(1, D), inv_rms, dy)
    return dx, dscale.reshape(D)


def rms_norm(x, scale, *, eps=1e-6, block_rows=16):
    """RMSNorm of the rows of x [R, D] with a learned scale [D]: x / rms(x) * scale.

    eps: added to the mean square before the square root.
    block_rows: rows per block, a positive multiple of 8 (shrinks to R when larger).

    Returns [R, D] in x's dtype (float32 statistics inside); differentiable in x and
    scale. The forward saves one float per row (1 / rms), never the normalised rows.
    """
    if x.ndim != 2 or scale.shape != x.shape[1:]:
        raise ValueError(f"rms_norm: x must be [R, D] and scale [D]; got shapes {x.shape} "
                         f"and {scale.shape}")
    _check_block("rms_norm", "block_rows", block_rows, 8)
    block_rows = min(block_rows, len(x))

    @jax.custom_vjp
    def normalise(x, scale):
        y, _ = rms_norm_forward(x, scale, eps=eps, block_rows=block_rows)
        return y

    def normalise_forward(x, scale):
        y, inv_rms = rms_norm_forward(x, scale, eps=eps, block_rows=block_rows)
        return y, (x, scale, inv_rms)

    def normalise_backward(residuals, dy):
        return rms_norm_backward(*residuals, dy, block_rows=block_rows)

    normalise.defvjp(normalise_forward, normalise_backward)
    return normalise(x, scale)


# 6. norms.layer_norm — mean and variance, dscale and dbias ------------------------

def layer_norm_forward_kernel(x_ref, scale_ref, bias_ref, y_ref, mean_ref, rstd_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    mean = jnp.mean(x, axis=1, keepdims=True)
    centred = x - mean
    # The variance of the centred values: E[x^2] - E[x]^2 would cancel catastrophically
    # for rows far from zero.
    rstd = jax.lax.rsqrt(jnp.mean(centred * centred, axis=1, keepdims=True) + eps)
    y = centred * rstd * scale_ref[...].astype(jnp.float32) + bias_ref[...].astype(jnp.float32)
    y_ref[...] = y.astype(y_ref.dtype)
    mean_ref[...] = mean
    rstd_ref[...] = rstd


def layer_norm_forward(x, scale, bias, *, eps=1e-5, block_rows=8):
    R, D = x.shape
    rows = pl.BlockSpec((block_rows, D), lambda i: (i, 0))
    whole = pl.BlockSpec((1, D), lambda i: (0, 0))
    per_row = pl.BlockSpec((block_rows, 1), lambda i: (i, 0))
    return pl.pallas_call(
        functools.partial(layer_norm_forward_kernel, eps=eps),
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype),
                   jax.ShapeDtypeStruct((R, 1), jnp.float32),
                   jax.ShapeDtypeStruct((R, 1), jnp.float32)],
        grid=(pl.cdiv(R, block_rows),),
        in_specs=[rows, whole, whole],
        out_specs=[rows, per_row, per_row],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, scale.reshape(1, D), bias.reshape(1, D))


def layer_norm_backward_kernel(x_ref, scale_ref, mean_ref, rstd_ref, dy_ref, dx_ref,
                               dscale_ref, dbias_ref, dscale_scratch, dbias_scratch, *, R):
    i = pl.program_id(0)
    block_rows = x_ref.shape[0]

    @pl.when(i == 0)
    def start():
        dscale_scratch[...] = jnp.zeros_like(dscale_scratch)
        dbias_scratch[...] = jnp.zeros_like(dbias_scratch)

    rstd = rstd_ref[...]
    x_hat = (x_ref[...].astype(jnp.float32) - mean_ref[...]) * rstd
    dy = dy_ref[...].astype(jnp.float32)
    g = dy * scale_ref[...].astype(jnp.float32)
    dx = rstd * (g - jnp.mean(g, axis=1, keepdims=True)
                 - x_hat * jnp.mean(g * x_hat, axis=1, keepdims=True))
    dx_ref[...] = dx.astype(dx_ref.dtype)
    row = i * block_rows + jax.lax.broadcasted_iota(jnp.int32, (block_rows, 1), 0)
    real = row < R
    dscale_scratch[...] += jnp.sum(jnp.where(real, dy * x_hat, 0.0), axis=0, keepdims=True)
    dbias_scratch[...] += jnp.sum(jnp.where(real, dy, 0.0), axis=0, keepdims=True)

    @pl.when(i == pl.num_programs(0) - 1)
    def finish():
        dscale_ref[...] = dscale_scratch[...].astype(dscale_ref.dtype)
        dbias_ref[...] = dbias_scratch[...].astype(dbias_ref.dtype)


def layer_norm_backward(x, scale, mean, rstd, dy, *, block_rows=8):
    R, D = x.shape
    rows = pl.BlockSpec((block_rows, D), lambda i: (i, 0))
    whole = pl.BlockSpec((1, D), lambda i: (0, 0))
    per_row = pl.BlockSpec((block_rows, 1), lambda i: (i, 0))
    dx, dscale, dbias = pl.pallas_call(
        functools.partial(layer_norm_backward_kernel, R=R),
        out_shape=[jax.ShapeDtypeStruct(x.shape, dy.dtype),
                   jax.ShapeDtypeStruct((1, D), scale.dtype),
                   jax.ShapeDtypeStruct((1, D), scale.dtype)],
        grid=(pl.cdiv(R, block_rows),),
        in_specs=[rows, whole, per_row, per_row, rows],
        out_specs=[rows, whole, whole],
        scratch_shapes=[pltpu.VMEM((1, D), jnp.float32), pltpu.VMEM((1, D), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
    )(x, scale.reshape(1, D), mean, rstd, dy)
    return dx, dscale.reshape(D), dbias.reshape(D)


def layer_norm(x, scale, bias, *, eps=1e-5, block_rows=16):
    """LayerNorm of the rows of x [R, D]: (x - mean) / sqrt(var + eps) * scale + bias.

    scale, bias [D]; block_rows: rows per block, a positive multiple of 8 (shrinks to R
    when larger). Returns [R, D] in x's dtype (float32 statistics inside);
    differentiable in x, scale and bias. The forward saves two floats per row.
    """
    if x.ndim != 2 or scale.shape != x.shape[1:] or bias.shape != x.shape[1:]:
        raise ValueError(f"layer_norm: x must be [R, D], scale and bias [D]; got shapes "
                         f"{x.shape}, {scale.shape} and {bias.shape}")
    _check_block("layer_norm", "block_rows", block_rows, 8)
    block_rows = min(block_rows, len(x))

    @jax.custom_vjp
    def normalise(x, scale, bias):
        y, _, _ = layer_norm_forward(x, scale, bias, eps=eps, block_rows=block_rows)
        return y

    def normalise_forward(x, scale, bias):
        y, mean, rstd = layer_norm_forward(x, scale, bias, eps=eps, block_rows=block_rows)
        return y, (x, scale, mean, rstd)

    def normalise_backward(residuals, dy):
        return layer_norm_backward(*residuals, dy, block_rows=block_rows)

    normalise.defvjp(normalise_forward, normalise_backward)
    return normalise(x, scale, bias)


# 7. norms.fused_xent — the loss over vocabulary blocks, no [T, V] array ------------

def cross_entropy_forward_kernel(h_ref, w_ref, labels_ref, loss_ref, lse_ref, m_scratch,
                                 l_scratch, picked_scratch, *, V):
    v = pl.program_id(1)
    block_v = w_ref.shape[1]

    @pl.when(v == 0)
    def start_token_block():
        m_scratch[...] = jnp.full_like(m_scratch, -jnp.inf)
        l_scratch[...] = jnp.zeros_like(l_scratch)
        picked_scratch[...] = jnp.zeros_like(picked_scratch)

    logits = jnp.dot(h_ref[...], w_ref[...], preferred_element_type=jnp.float32)
    col = v * block_v + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    logits = jnp.where(col < V, logits, -jnp.inf)     # vocabulary past V: garbage
    m = m_scratch[...]
    m_new = jnp.maximum(m, jnp.max(logits, axis=1, keepdims=True))
    l_scratch[...] = (jnp.exp(m - m_new) * l_scratch[...]
                      + jnp.sum(jnp.exp(logits - m_new), axis=1, keepdims=True))
    m_scratch[...] = m_new
    # The label's logit sits in exactly one vocabulary block.
    picked_scratch[...] += jnp.sum(jnp.where(col == labels_ref[...], logits, 0.0), axis=1,
                                   keepdims=True)

    @pl.when(v == pl.num_programs(1) - 1)
    def finish_token_block():
        lse = m_scratch[...] + jnp.log(l_scratch[...])
        loss_ref[...] = lse - picked_scratch[...]
        lse_ref[...] = lse


def cross_entropy_forward(h, w, labels, *, block_t=128, block_v=512):
    (T, D), V = h.shape, w.shape[1]
    per_token = pl.BlockSpec((block_t, 1), lambda t, v: (t, 0))
    loss, lse = pl.pallas_call(
        functools.partial(cross_entropy_forward_kernel, V=V),
        out_shape=[jax.ShapeDtypeStruct((T, 1), jnp.float32),
                   jax.ShapeDtypeStruct((T, 1), jnp.float32)],
        grid=(pl.cdiv(T, block_t), pl.cdiv(V, block_v)),
        in_specs=[pl.BlockSpec((block_t, D), lambda t, v: (t, 0)),
                  pl.BlockSpec((D, block_v), lambda t, v: (0, v)),
                  per_token],
        out_specs=[per_token, per_token],
        scratch_shapes=[pltpu.VMEM((block_t, 1), jnp.float32),    # m: running max
                        pltpu.VMEM((block_t, 1), jnp.float32),    # l: running sum
                        pltpu.VMEM((block_t, 1), jnp.float32)],   # the label's logit
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(h, w, labels.reshape(T, 1))
    return loss.reshape(T), lse


# 8. norms.xent_backward — dh and dw, recomputing the logits block by block ------------

def cross_entropy_dh_kernel(h_ref, w_ref, labels_ref, lse_ref, dloss_ref, dh_ref,
                            dh_scratch, *, V):
    v = pl.program_id(1)
    block_v = w_ref.shape[1]

    @pl.when(v == 0)
    def start_token_block():
        dh_scratch[...] = jnp.zeros_like(dh_scratch)

    col = v * block_v + jax.lax.broadcasted_iota(jnp.int32, w_ref.shape, 1)
    w = jnp.where(col < V, w_ref[...], 0)     # garbage columns: 0 * NaN would be NaN
    logits = jnp.dot(h_ref[...], w, preferred_element_type=jnp.float32)
    col = v * block_v + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    p = jnp.exp(logits - lse_ref[...])                           # the softmax, again
    dlogits = (p - (col == labels_ref[...])) * dloss_ref[...]
    dh_scratch[...] += jnp.einsum("tv,dv->td", dlogits.astype(w.dtype), w,
                                  preferred_element_type=jnp.float32)

    @pl.when(v == pl.num_programs(1) - 1)
    def finish_token_block():
        dh_ref[...] = dh_scratch[...].astype(dh_ref.dtype)


def cross_entropy_dw_kernel(h_ref, w_ref, labels_ref, lse_ref, dloss_ref, dw_ref,
                            dw_scratch, *, T):
    v, t = pl.program_id(0), pl.program_id(1)
    block_t, block_v = h_ref.shape[0], w_ref.shape[1]

    @pl.when(t == 0)
    def start_vocabulary_block():
        dw_scratch[...] = jnp.zeros_like(dw_scratch)

    row = t * block_t + jax.lax.broadcasted_iota(jnp.int32, h_ref.shape, 0)
    h = jnp.where(row < T, h_ref[...], 0)     # garbage tokens: 0 * NaN would be NaN
    logits = jnp.dot(h, w_ref[...], preferred_element_type=jnp.float32)
    col = v * block_v + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    row = t * block_t + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 0)
    p = jnp.exp(logits - lse_ref[...])
    dlogits = jnp.where(row < T, (p - (col == labels_ref[...])) * dloss_ref[...], 0.0)
    dw_scratch[...] += jnp.einsum("td,tv->dv", h, dlogits.astype(h.dtype),
                                  preferred_element_type=jnp.float32)

    @pl.when(t == pl.num_programs(1) - 1)
    def finish_vocabulary_block():
        dw_ref[...] = dw_scratch[...].astype(dw_ref.dtype)


def cross_entropy_backward(h, w, labels, lse, dloss, *, block_t=128, block_v=512):
    (T, D), V = h.shape, w.shape[1]
    labels, dloss = labels.reshape(T, 1), dloss.reshape(T, 1).astype(jnp.float32)
    num_t, num_v = pl.cdiv(T, block_t), pl.cdiv(V, block_v)

    # dh: a token block sums over the vocabulary blocks, grid (t, v).
    per_token = pl.BlockSpec((block_t, 1), lambda t, v: (t, 0))
    tokens = pl.BlockSpec((block_t, D), lambda t, v: (t, 0))
    dh = pl.pallas_call(
        functools.partial(cross_entropy_dh_kernel, V=V),
        out_shape=jax.ShapeDtypeStruct(h.shape, h.dtype),
        grid=(num_t, num_v),
        in_specs=[tokens, pl.BlockSpec((D, block_v), lambda t, v: (0, v)), per_token,
                  per_token, per_token],
        out_specs=tokens,
        scratch_shapes=[pltpu.VMEM((block_t, D), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(h, w, labels, lse, dloss)

    # dw: a vocabulary block sums over the token blocks, grid (v, t).
    per_token = pl.BlockSpec((block_t, 1), lambda v, t: (t, 0))
    vocabulary = pl.BlockSpec((D, block_v), lambda v, t: (0, v))
    dw = pl.pallas_call(
        functools.partial(cross_entropy_dw_kernel, T=T),
        out_shape=jax.ShapeDtypeStruct(w.shape, w.dtype),
        grid=(num_v, num_t),
        in_specs=[pl.BlockSpec((block_t, D), lambda v, t: (t, 0)), vocabulary, per_token,
                  per_token, per_token],
        out_specs=vocabulary,
        scratch_shapes=[pltpu.VMEM((D, block_v), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(h, w, labels, lse, dloss)
    return dh, dw


def cross_entropy(h, w, labels, *, block_t=128, block_v=512):
    """Per-token cross-entropy of softmax(h @ w) against integer labels, fused.

    h [T, D] hidden states; w [D, V] the output projection; labels int [T] in [0, V).
    block_t: tokens per block, a positive multiple of 8; block_v: vocabulary entries
        per block, a positive multiple of 128 (each shrinks to its dim when larger).

    Returns the loss, float32 [T]: logsumexp(h @ w) - (h @ w)[label], computed over
    vocabulary blocks with an online logsumexp, so that no [T, V] array is ever
    written to HBM; differentiable in h and w (the backward recomputes the logits
    block by block). Concrete labels outside [0, V) raise a ValueError.
    """
    if h.ndim != 2 or w.ndim != 2 or h.shape[1] != w.shape[0]:
        raise ValueError(f"cross_entropy: h must be [T, D] and w [D, V]; got shapes "
                         f"{h.shape} and {w.shape}")
    if labels.shape != h.shape[:1] or not jnp.issubdtype(labels.dtype, jnp.integer):
        raise ValueError(f"cross_entropy: labels must be integers of shape [T]={h.shape[:1]}; "
                         f"got shape {labels.shape} and dtype {labels.dtype}")
    _check_block("cross_entropy", "block_t", block_t, 8)
    _check_block("cross_entropy", "block_v", block_v, 128)
    (T, _), V = h.shape, w.shape[1]
    try:
        values = np.asarray(labels)
    except TypeError:         # traced labels: their values exist only when the program runs
        values = None
    if values is not None and values.size and (values.min() < 0 or values.max() >= V):
        raise ValueError(f"cross_entropy: labels must lie in [0, V={V}); got values from "
                         f"{values.min()} to {values.max()}")
    block_t, block_v = min(block_t, T), min(block_v, V)
    labels = labels.astype(jnp.int32)

    @jax.custom_vjp
    def loss(h, w, labels):
        per_token, _ = cross_entropy_forward(h, w, labels, block_t=block_t, block_v=block_v)
        return per_token

    def loss_forward(h, w, labels):
        per_token, lse = cross_entropy_forward(h, w, labels, block_t=block_t, block_v=block_v)
        return per_token, (h, w, labels, lse)

    def loss_backward(residuals, dloss):
        dh, dw = cross_entropy_backward(*residuals, dloss, block_t=block_t, block_v=block_v)
        return dh, dw, None        # labels are integers: no gradient

    loss.defvjp(loss_forward, loss_backward)
    return loss(h, w, labels)


def _check_block(function, name, block, multiple):
    """PROVIDED: raises a ValueError naming the argument unless block is a positive
    multiple of multiple (8 for rows and tokens, 128 for columns and vocabulary)."""
    if not isinstance(block, (int, np.integer)) or block <= 0 or block % multiple:
        raise ValueError(f"{function}: {name}={block!r} must be a positive multiple of "
                         f"{multiple}")
