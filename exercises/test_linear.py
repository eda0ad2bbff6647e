"""Tests for exercises/linear.py. Run them, don't edit them:

    pytest exercises/test_linear.py                # all puzzles of the chapter
    pytest exercises/test_linear.py -k gating      # one puzzle
    pytest exercises/test_linear.py -k gating --hint

Every test compares your code with the recurrence itself, S_t updated one token at a
time in float64 NumPy, on at least two shapes (one an edge case: a single chunk, beta
0 or 1, decay strong enough to underflow, bfloat16). The helpers decay_factors and
forward_substitution have small tests of their own, under their puzzles (gating,
delta_rule), so that a mistake in one is named where it is. The kernel tests then count the
dot work your kernel executed (O(T * chunk) per head, never O(T^2)) and the bytes it
moved between HBM and VMEM (each input read once, the output written once: the state
never leaves VMEM), check that the chunk axis runs in order, and that the kernel
would compile for a real TPU. Tests marked `tpu` run realistic sizes on a real TPU
and are skipped elsewhere.

Keys are L2-normalised wherever the delta rule runs (its callers do that), log
decays lie in [-5, 0] and beta in [0, 1].
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pytest_pallas_hints import (Structure, cdiv, chapter, check, check_vmem, check_work,
                                 lowers_for_tpu, measure, run_jax, tpu_sized)
from pytest_pallas_hints.lessons import linear as lesson
from pytest_pallas_hints.lessons.linear import recurrence

linear = chapter("linear")

puzzle = pytest.mark.puzzle
on_tpu = pytest.mark.tpu

# What each lesson requires of your program, checked from its trace: your own kernel
# does the matmuls (and the exps of the decay); nothing but reshapes around it.
MATMULS = Structure(inside={"dot_general"})
DECAYED = Structure(inside={"dot_general", "exp"})


def inputs(rng, B, N, T, H, Hv, dtype="float32", *, normalised=False, offset=0.0):
    """q, k [B, N, T, H] and v [B, N, T, Hv]; normalised: unit keys (the delta rule);
    offset: keys and values that share a common offset while the queries are centred,
    so that the state holds a large part that the outputs cancel (what bf16 loses)."""
    q = rng.normal((B, N, T, H), "float64")
    k = rng.normal((B, N, T, H), "float64") + offset
    v = rng.normal((B, N, T, Hv), "float64") + offset
    if offset:
        q -= q.mean(axis=-1, keepdims=True)
    if normalised:
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
    return tuple(x.astype(jnp.dtype(dtype)) for x in (q, k, v))


def gates(rng, B, N, T, *, strength=0.2, edges=False):
    """log_decay in [-strength, 0] and beta in [0, 1] (edges: beta only 0 or 1), f32."""
    log_decay = rng.uniform((B, N, T), -strength, 0.0)
    beta = rng.integers((B, N, T), 0, 2).astype(np.float32) if edges else rng.uniform((B, N, T))
    return log_decay, beta


def tolerance(dtype):
    return 1e-4 if dtype == "float32" else None


# --- what every chunked kernel must do -------------------------------------------

def chunked_structure(B, N, T, H, Hv, chunk, base=MATMULS, per_token=0):
    """One chunk of rows per grid step, for q, k, v and each per-token array (log_decay,
    beta), which travels as [B, N, T, 1] in (chunk, 1) blocks: checked before the run, so
    that (chunk,) blocks are named by the (8, 128) rule, not by their wrong values."""
    blocks = {"q": (None, None, chunk, H), "k": (None, None, chunk, H), "v": (None, None, chunk, Hv)}
    if per_token:
        blocks["per_token"] = (None, None, chunk, 1)
    return base.where(grid=(B, N, T // chunk), blocks=blocks)


# 1 -------------------------------------------------------------------------
@puzzle("linear.recurrent")
@pytest.mark.parametrize("B, N, T, H, Hv, gated, with_beta, dtype", [
    pytest.param(1, 2, 24, 16, 32, True, True, "float32",
                 id="B=1 N=2 T=24 H=16 Hv=32 log_decay and beta"),
    pytest.param(2, 1, 1, 8, 16, False, False, "bfloat16",
                 id="B=2 N=1 T=1 H=8 Hv=16 bf16 (one token, neither)"),
    pytest.param(1, 1, 20, 8, 8, False, True, "float32", id="B=N=1 T=20 H=Hv=8 beta only"),
    pytest.param(2, 4, 1024, 64, 64, True, True, "bfloat16",
                 id="B=2 N=4 T=1024 H=Hv=64 bf16 log_decay and beta-tpu", marks=on_tpu),
])
def test_recurrent(B, N, T, H, Hv, gated, with_beta, dtype, rng):
    q, k, v = inputs(rng, B, N, T, H, Hv, dtype, normalised=with_beta)
    log_decay, beta = gates(rng, B, N, T)
    log_decay = log_decay if gated else None
    beta = beta if with_beta else None
    check(run_jax(linear.recurrent, q, k, v, log_decay, beta),
          recurrence(q, k, v, log_decay, beta).astype(dtype), blocks=(1, 1, None, None),
          axes="B N T Hv", tolerance=tolerance(dtype),
          likely=lesson.recurrent_likely(q, k, v, log_decay, beta, dtype))


# 2 -------------------------------------------------------------------------
@puzzle("linear.intra")
@pytest.mark.parametrize("B, N, T, H, Hv, chunk, dtype", [
    pytest.param(1, 2, 64, 32, 64, 16, "float32", id="B=1 N=2 T=64 H=32 Hv=64 chunk=16"),
    pytest.param(2, 1, 16, 64, 32, 16, "bfloat16", id="B=2 N=1 T=16 H=64 Hv=32 bf16 (one chunk)"),
    pytest.param(4, 8, 2048, 128, 128, 128, "bfloat16", id="B=4 N=8 T=2048 H=Hv=128 bf16-tpu",
                 marks=on_tpu),
])
def test_intra(B, N, T, H, Hv, chunk, dtype, rng):
    q, k, v = inputs(rng, B, N, T, H, Hv, dtype)
    # Every chunk on its own, as the chunked kernels compute it: no state between chunks.
    expected = lesson.chunkwise(q, k, v, chunk=chunk, carry=False).astype(dtype)
    ran = measure(linear.intra_chunk, q, k, v, chunk=chunk,
                  structure=chunked_structure(B, N, T, H, Hv, chunk))
    check(ran, expected, blocks=(1, 1, chunk, None), axes="B N T Hv",
          tolerance=tolerance(dtype), likely=lesson.intra_likely(q, k, v, chunk=chunk,
                                                                 dtype=dtype))
    if tpu_sized():
        return
    check_work(ran, flops=lesson.intra_flops(B, N, T, H, Hv, chunk))
    lesson.check_products_in_input_dtype(ran, dtype, most_wide=0)
    lowers_for_tpu(ran)


# 3 -------------------------------------------------------------------------
@puzzle("linear.chunked")
@pytest.mark.parametrize("B, N, T, H, Hv, chunk, dtype, offset", [
    pytest.param(1, 2, 64, 32, 64, 16, "float32", 0.0, id="B=1 N=2 T=64 H=32 Hv=64 chunk=16"),
    # Keys and values share an offset and the queries cancel it: the state holds a large
    # part the outputs never see, and bf16 would keep only its top bits.
    pytest.param(1, 1, 128, 32, 128, 16, "bfloat16", 3.0,
                 id="B=N=1 T=128 H=32 Hv=128 chunk=16 bf16 (8 chunks, offset keys)"),
    pytest.param(4, 8, 4096, 128, 128, 64, "bfloat16", 0.0,
                 id="B=4 N=8 T=4096 H=Hv=128 chunk=64 bf16-tpu", marks=on_tpu),
])
def test_chunked(B, N, T, H, Hv, chunk, dtype, offset, rng):
    """Right values; O(T * chunk) dot work; each input read once and the output written
    once (the state never goes to HBM); the chunk axis in order; VMEM for one chunk."""
    q, k, v = inputs(rng, B, N, T, H, Hv, dtype, offset=offset)
    expected, wrong = lesson.expected_and_wrong(q, k, v, chunk=chunk, dtype=dtype)
    ran = measure(linear.chunked_call, q, k, v, kernel=linear.linear_kernel, chunk=chunk,
                  structure=chunked_structure(B, N, T, H, Hv, chunk))
    lesson.check_chunks_in_order(ran)
    lesson.check_state_reset_once(ran)
    lesson.check_state_read_in_float32(ran)
    lesson.check_chunked(ran, expected, wrong=wrong, chunk=chunk, tolerance=tolerance(dtype),
                         likely=lesson.chunked_likely(wrong))
    if tpu_sized():
        return
    check_work(ran, flops=lesson.chunk_flops(B, N, T, H, Hv, chunk),
               likely={"quadratic": lesson.quadratic_flops(B, N, T, H, Hv, chunk)})
    lesson.check_products_in_input_dtype(ran, dtype, most_wide=lesson.state_flops(
        B, N, T, H, Hv, chunk))
    lesson.check_moves_once(ran, q, k, v, out_bytes=expected.nbytes)
    check_vmem(ran, most=lesson.chunked_vmem(chunk, H, Hv, q.itemsize),
               why="one chunk of q, k, v and o (two buffers each) and one [H, Hv] float32 "
                   "state.")
    lowers_for_tpu(ran)


# 4 -------------------------------------------------------------------------
@puzzle("linear.gating")
@pytest.mark.parametrize("C, strength", [
    # 64 steps of up to -5: b_i - b_j reaches about 160 above the diagonal, where
    # exp overflows float32.
    pytest.param(64, 5.0, id="C=64 log_decay>=-5 (one chunk's decays, strong)"),
])
def test_gating_decay_factors(C, strength, rng):
    """decay_factors on its own: its four outputs, evaluated one operation at a time, as a
    TPU rounds them (compiled for CPU, XLA would turn a multiply by a mask into a select,
    which hides an inf times zero)."""
    log_decay = rng.uniform((C, 1), -strength, 0.0)
    with jax.disable_jit():   # op by op: no rewrite across operations
        factors = linear.decay_factors(jnp.asarray(log_decay))
    factors = lesson.check_factors(factors, C)
    a = np.asarray(log_decay, np.float64)[:, 0]

    def factors_of(b):   # b: the cumulative log decay, (C,)
        total = a.sum()
        within = np.where(np.tri(C, dtype=bool),
                          np.exp(np.minimum(b[:, None] - b[None, :], 0.0)), 0.0)
        return dict(within=within, since_start=np.exp(b)[:, None],
                    until_end=np.exp(total - b)[:, None], across=np.full((1, 1), np.exp(total)))

    expected = factors_of(np.cumsum(a))
    exclusive = factors_of(np.cumsum(a) - a)
    lesson.check_within_masked(factors[0])
    narrow = lesson.holds_narrow_floats(linear.decay_factors, jnp.asarray(log_decay))
    for name, yours in zip(("within", "since_start", "until_end", "across"), factors):
        lesson.check_factor(yours, expected[name].astype(np.float32), name=name, narrow=narrow,
                            likely={"decay_exclusive": exclusive[name].astype(np.float32)})


@puzzle("linear.gating")
@pytest.mark.parametrize("B, N, T, H, Hv, chunk, strength, dtype, offset", [
    pytest.param(1, 2, 64, 32, 64, 16, 0.2, "float32", 0.0,
                 id="B=1 N=2 T=64 H=32 Hv=64 chunk=16 log_decay>=-0.2"),
    # 64 steps of up to -5: b reaches about -160 inside a chunk, past float32's exp range.
    pytest.param(1, 1, 128, 16, 32, 64, 5.0, "float32", 0.0,
                 id="B=N=1 T=128 H=16 Hv=32 chunk=64 log_decay>=-5 (strong decay)"),
    # As puzzle 3's: a state that holds a large part the outputs never see, kept over 8
    # chunks by a weak decay.
    pytest.param(1, 1, 128, 32, 128, 16, 0.02, "bfloat16", 3.0,
                 id="B=N=1 T=128 H=32 Hv=128 chunk=16 log_decay>=-0.02 bf16 (8 chunks, "
                    "offset keys)"),
    pytest.param(4, 8, 4096, 128, 128, 64, 1.0, "bfloat16", 0.0,
                 id="B=4 N=8 T=4096 H=Hv=128 chunk=64 bf16-tpu", marks=on_tpu),
])
def test_gating(B, N, T, H, Hv, chunk, strength, dtype, offset, rng):
    q, k, v = inputs(rng, B, N, T, H, Hv, dtype, offset=offset)
    log_decay, _ = gates(rng, B, N, T, strength=strength)
    expected, wrong = lesson.expected_and_wrong(q, k, v, log_decay, chunk=chunk, dtype=dtype)
    ran = measure(linear.chunked_call, q, k, v, log_decay, kernel=linear.gated_kernel,
                  chunk=chunk, structure=chunked_structure(B, N, T, H, Hv, chunk, DECAYED,
                                                           per_token=1))
    lesson.check_chunks_in_order(ran)
    lesson.check_state_reset_once(ran)
    lesson.check_state_read_in_float32(ran)
    lesson.check_chunked(ran, expected, wrong=wrong, chunk=chunk, tolerance=tolerance(dtype),
                         likely=lesson.gating_likely(wrong))
    lesson.check_decay_masked(ran)
    if tpu_sized():
        return
    check_work(ran, flops=lesson.chunk_flops(B, N, T, H, Hv, chunk))
    lesson.check_products_in_input_dtype(ran, dtype, most_wide=lesson.state_flops(
        B, N, T, H, Hv, chunk))
    lowers_for_tpu(ran)


# 5 -------------------------------------------------------------------------
def hidden_value(rng, B, N, T, H, Hv, log_decay, beta, *, chunk, share=0.8, scale=1000.0):
    """bf16 q, k [B, N, T, H] and v [B, N, T, Hv] for the delta rule, with a state that
    holds one large value which every prediction k S reads and no output q S sees.

    One key direction d (all ones, normalised) carries a value of about `scale`: tokens 0
    and 1 write it (key d, beta 1), and every later key has `share` of d and a value that
    is that share of it, decayed as the state is, plus O(1) noise. The queries are
    orthogonal to d. So k S is about `scale` for every key while the outputs are O(1): a
    state rounded to bf16 (8 significant bits) before k S errs by about scale / 512 in
    every prediction, and that error is written back along the keys, where q sees it.
    Sets beta to 1 on tokens 0 and 1 and log_decay to 0 in the first chunk (in place), so
    that the large writes are rounded only as the inputs are."""
    beta[..., :2] = 1.0
    if log_decay is not None:
        log_decay[..., :chunk] = 0.0
    d = np.ones(H) / np.sqrt(H)
    noise = rng.normal((B, N, T, H), "float64")
    noise -= noise.mean(axis=-1, keepdims=True)
    noise /= np.linalg.norm(noise, axis=-1, keepdims=True)
    k = share * d + np.sqrt(1 - share ** 2) * noise
    k[:, :, :2] = d
    q = rng.normal((B, N, T, H), "float64")
    q -= q.mean(axis=-1, keepdims=True)
    q, k = (x.astype(jnp.bfloat16) for x in (q, k))
    decayed = 1.0 if log_decay is None else np.exp(
        np.cumsum(np.asarray(log_decay, np.float64), axis=-1))
    along_d = np.asarray(k, np.float64) @ d * decayed
    v = rng.normal((B, N, T, Hv), "float64") + scale * along_d[..., None]
    return q, k, v.astype(jnp.bfloat16)


@puzzle("linear.delta_rule")
@pytest.mark.parametrize("C, W", [pytest.param(16, 24, id="C=16 W=24")])
def test_delta_rule_forward_substitution(C, W, rng):
    """forward_substitution on its own, against a triangular solve in float64."""
    lower = np.tril(rng.uniform((C, C), -0.5, 0.5), -1).astype(np.float32)
    rhs = rng.normal((C, W))
    system = np.eye(C) + np.asarray(lower, np.float64)
    expected = np.linalg.solve(system, np.asarray(rhs, np.float64))
    check(run_jax(linear.forward_substitution, lower, rhs), expected.astype(np.float32),
          name="u", tolerance=1e-4, likely=lesson.substitution_likely(lower, rhs, expected))


@puzzle("linear.delta_rule")
@pytest.mark.parametrize("B, N, T, H, Hv, chunk, edges, dtype", [
    pytest.param(1, 2, 64, 32, 64, 16, False, "float32", id="B=1 N=2 T=64 H=32 Hv=64 chunk=16"),
    # One key direction holds a value of about 1000 that every prediction k S reads and
    # no query sees (hidden_value): bf16 would keep only its top bits.
    pytest.param(1, 1, 128, 16, 32, 16, True, "bfloat16",
                 id="B=N=1 T=128 H=16 Hv=32 chunk=16 bf16 (8 chunks, beta 0 or 1, "
                    "a large hidden value)"),
    pytest.param(4, 8, 4096, 128, 128, 64, False, "float32",
                 id="B=4 N=8 T=4096 H=Hv=128 chunk=64-tpu", marks=on_tpu),
])
def test_delta_rule(B, N, T, H, Hv, chunk, edges, dtype, rng):
    _, beta = gates(rng, B, N, T, edges=edges)
    if dtype == "float32":
        q, k, v = inputs(rng, B, N, T, H, Hv, normalised=True)
    else:
        q, k, v = hidden_value(rng, B, N, T, H, Hv, None, beta, chunk=chunk)
    expected, wrong = lesson.expected_and_wrong(q, k, v, beta=beta, chunk=chunk, dtype=dtype)
    ran = measure(linear.chunked_call, q, k, v, beta, kernel=linear.delta_kernel,
                  chunk=chunk, structure=chunked_structure(B, N, T, H, Hv, chunk, per_token=1))
    lesson.check_chunks_in_order(ran)
    lesson.check_state_reset_once(ran)
    lesson.check_state_read_in_float32(ran)
    lesson.check_chunked(ran, expected, wrong=wrong, chunk=chunk, tolerance=tolerance(dtype),
                         likely=lesson.delta_likely(wrong))
    if tpu_sized():
        return
    check_work(ran, flops=lesson.flops_of(ran, functools.partial(
        lesson.chunk_flops, B, N, T, H, Hv, chunk, delta=True)),
        moving=lesson.every_product_moves(T, chunk))
    lesson.check_products_in_input_dtype(ran, dtype, most_wide=lesson.state_flops(
        B, N, T, H, Hv, chunk, delta=True))
    lowers_for_tpu(ran)


# 6 -------------------------------------------------------------------------
@puzzle("linear.gated_delta")
@pytest.mark.parametrize("B, N, T, H, Hv, chunk, strength, edges, dtype", [
    pytest.param(1, 2, 64, 32, 64, 16, 0.2, False, "float32",
                 id="B=1 N=2 T=64 H=32 Hv=64 chunk=16 log_decay>=-0.2"),
    pytest.param(1, 1, 96, 16, 32, 32, 5.0, True, "float32",
                 id="B=N=1 T=96 H=16 Hv=32 chunk=32 log_decay>=-5 (beta 0 or 1)"),
    # As delta_rule's bf16 configuration, with a weak decay that the values follow.
    pytest.param(1, 1, 128, 16, 32, 16, 0.02, False, "bfloat16",
                 id="B=N=1 T=128 H=16 Hv=32 chunk=16 log_decay>=-0.02 bf16 (8 chunks, "
                    "a large hidden value)"),
    pytest.param(4, 8, 4096, 128, 128, 64, 1.0, False, "float32",
                 id="B=4 N=8 T=4096 H=Hv=128 chunk=64-tpu", marks=on_tpu),
])
def test_gated_delta(B, N, T, H, Hv, chunk, strength, edges, dtype, rng):
    log_decay, beta = gates(rng, B, N, T, strength=strength, edges=edges)
    if dtype == "float32":
        q, k, v = inputs(rng, B, N, T, H, Hv, normalised=True)
    else:
        q, k, v = hidden_value(rng, B, N, T, H, Hv, log_decay, beta, chunk=chunk)
    expected, wrong = lesson.expected_and_wrong(q, k, v, log_decay, beta, chunk=chunk, dtype=dtype)
    ran = measure(linear.chunked_call, q, k, v, beta, log_decay,
                  kernel=linear.gated_delta_kernel, chunk=chunk,
                  structure=chunked_structure(B, N, T, H, Hv, chunk, DECAYED, per_token=2))
    lesson.check_chunks_in_order(ran)
    lesson.check_state_reset_once(ran)
    lesson.check_state_read_in_float32(ran)
    lesson.check_chunked(ran, expected, wrong=wrong, chunk=chunk, tolerance=tolerance(dtype),
                         likely=lesson.gated_delta_likely(wrong, q, k, v, log_decay, beta,
                                                          chunk=chunk, dtype=dtype))
    lesson.check_decay_masked(ran)
    if tpu_sized():
        return
    check_work(ran, flops=lesson.flops_of(ran, functools.partial(
        lesson.chunk_flops, B, N, T, H, Hv, chunk, delta=True)),
        moving=lesson.every_product_moves(T, chunk))
    lesson.check_products_in_input_dtype(ran, dtype, most_wide=lesson.state_flops(
        B, N, T, H, Hv, chunk, delta=True))
    lowers_for_tpu(ran)


# 7 -------------------------------------------------------------------------
PUBLIC = ("linear_attention", "gated_linear_attention", "delta_rule", "gated_delta_rule")


def public(q, k, v, beta, log_decay, *, chunk, names):
    """The public functions `names` on one set of inputs, as one program."""
    calls = {"linear_attention": lambda: linear.linear_attention(q, k, v, chunk=chunk),
             "gated_linear_attention": lambda: linear.gated_linear_attention(
                 q, k, v, log_decay, chunk=chunk),
             "delta_rule": lambda: linear.delta_rule(q, k, v, beta, chunk=chunk),
             "gated_delta_rule": lambda: linear.gated_delta_rule(q, k, v, beta, log_decay,
                                                                  chunk=chunk)}
    return tuple(calls[name]() for name in names)


@puzzle("linear.api")
@pytest.mark.parametrize("B, N, T, H, Hv, chunk, dtype, names", [
    pytest.param(2, 2, 20, 32, 16, 16, "float32", PUBLIC,
                 id="B=2 N=2 T=20 H=32 Hv=16 chunk=16 (a last partial chunk, all four)"),
    pytest.param(1, 1, 1, 16, 8, 64, "bfloat16", PUBLIC[3:],
                 id="B=N=1 T=1 H=16 Hv=8 chunk=64 bf16 (one token, gated delta rule)"),
    pytest.param(1, 2, 100, 32, 64, 16, "bfloat16", PUBLIC[1:2],
                 id="B=1 N=2 T=100 H=32 Hv=64 chunk=16 bf16 (7 chunks, gated linear attention)"),
    # T a multiple of the chunk (and of 8): no padding at all, beside the T's above that
    # need some; the same T shorter than the chunk shrinks it to T, and pads nothing.
    pytest.param(1, 2, 32, 16, 16, 16, "float32", PUBLIC[::3],
                 id="B=1 N=2 T=32 H=Hv=16 chunk=16 (2 whole chunks: no padding)"),
    pytest.param(1, 1, 24, 16, 16, 64, "float32", PUBLIC[1:3],
                 id="B=N=1 T=24 H=Hv=16 chunk=64 (chunk shrinks to T=24: no padding)"),
    pytest.param(2, 8, 3000, 128, 128, 64, "bfloat16", PUBLIC,
                 id="B=2 N=8 T=3000 H=Hv=128 chunk=64 bf16 (all four)-tpu", marks=on_tpu),
])
def test_api(B, N, T, H, Hv, chunk, dtype, names, rng):
    q, k, v = inputs(rng, B, N, T, H, Hv, dtype, normalised=True)
    log_decay, beta = gates(rng, B, N, T)
    C = min(chunk, cdiv(T, 8) * 8)   # a chunk longer than T shrinks to T rounded up to 8
    ran = measure(public, q, k, v, beta, log_decay, chunk=chunk, names=names,
                  structure=DECAYED.where(kernels=len(names), outside={"pad", "slice"},
                                          grid=(B, N, cdiv(T, C))))
    gating = {"linear_attention": {}, "gated_linear_attention": dict(log_decay=log_decay),
              "delta_rule": dict(beta=beta),
              "gated_delta_rule": dict(log_decay=log_decay, beta=beta)}
    for name, yours in zip(names, ran.output):
        gate = gating[name]
        check(yours, recurrence(q, k, v, **gate).astype(dtype), name=name,
              blocks=(1, 1, chunk, None), axes="B N T Hv", tolerance=tolerance(dtype),
              likely=lesson.api_likely(q, k, v, gate, T=T, chunk=chunk, dtype=dtype))
    if tpu_sized():
        return
    # A chunk longer than the sequence shrinks to it, rounded up to 8 rows.
    lesson.check_chunk_rounded(ran, T=T, chunk=chunk)
    # One chunk: the state q multiplies is still zero when read (every_product_moves).
    check_work(ran, flops=lesson.flops_of(ran, functools.partial(
        lesson.api_flops, B, N, T, H, Hv, chunk, names)),
        moving=lesson.every_product_moves(T, chunk))
    lesson.check_products_in_input_dtype(ran, dtype, most_wide=lesson.api_state_flops(
        B, N, T, H, Hv, chunk, names))
    lowers_for_tpu(ran)


@puzzle("linear.api")
@pytest.mark.parametrize("bad", [
    pytest.param("v", id="v with another T"),
    pytest.param("beta", id="beta of shape [B, N]"),
    pytest.param("chunk", id="chunk=12 (not a multiple of 8)"),
])
def test_api_checks_its_arguments(bad, rng):
    """Bad arguments fail up front, with a ValueError that names them."""
    q, k, v = inputs(rng, 1, 2, 32, 16, 16)
    _, beta = gates(rng, 1, 2, 32)
    chunk = 16
    if bad == "v":
        v = v[:, :, :24]
    elif bad == "beta":
        beta = beta[:, :, 0]
    else:
        chunk = 12
    lesson.check_names_bad_argument(linear.delta_rule, q, k, v, beta, chunk=chunk, bad=bad)
