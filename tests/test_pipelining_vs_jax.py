"""reference/pipelining.py's paged_attention against JAX's own Pallas TPU paged attention
(jax.experimental.pallas.ops.tpu.paged_attention), both in TPU interpret mode.

JAX's kernel rounds K and V to bfloat16 inside (for float32 inputs, its largest error
against float64 is 3e-3 to 7e-3 of the largest value in these cases); ours keeps
float32. So, on several (B, N, K, page size, lengths) cases, among them a length that
ends mid-page, a length of one token and a length of zero:

* ours is within 2e-4 (relative to the largest |value|) of float64 attention over the
  gathered pages;
* ours and JAX's differ by no more than JAX's own error (plus ours);
* on K and V that bfloat16 holds exactly, JAX's rounding changes nothing, and the two
  kernels agree to float32 rounding (1e-5);
* ours fetches only the pages that hold a token; JAX's fetches whole compute blocks;
* the kit's DMA ledger accepts JAX's kernel, which keeps a copy in flight from one
  sequence to the next, and counts the pages it fetches.
"""
import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention as jax_paged

from pytest_pallas_hints import runtime
from pytest_pallas_hints.checking import measure

ROOT = Path(__file__).resolve().parent.parent


def load_reference():
    path = ROOT / "reference" / "pipelining.py"
    spec = importlib.util.spec_from_file_location("reference_pipelining", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pipelining = load_reference()


@pytest.fixture(autouse=True)
def interpret_mode():
    """TPU interpret mode for every kernel here, as the plugin sets it for learners."""
    runtime.use_interpret_mode(True)


def cdiv(a, b):
    return -(-a // b)


def inputs(seed, B, N, K, H, L, pages_per_sequence, dtype=np.float32):
    gen = np.random.default_rng(seed)
    P = 2 * B * pages_per_sequence
    q = gen.standard_normal((B, N, H)).astype(dtype)
    k_pages = gen.standard_normal((K, P, L, H)).astype(dtype)
    v_pages = gen.standard_normal((K, P, L, H)).astype(dtype)
    page_indices = gen.permutation(P)[:B * pages_per_sequence].astype(np.int32)
    return q, k_pages, v_pages, page_indices.reshape(B, pages_per_sequence)


def attention64(q, k_pages, v_pages, lengths, page_indices):
    """Float64 attention of each sequence's query over its first lengths[b] tokens."""
    B, N, H = q.shape
    K = k_pages.shape[0]
    out = np.zeros((B, N, H))
    for b in range(B):
        if lengths[b] == 0:
            continue
        heads = np.arange(N) // (N // K)
        k = k_pages[:, page_indices[b]].reshape(K, -1, H)[heads, :lengths[b]]
        v = v_pages[:, page_indices[b]].reshape(K, -1, H)[heads, :lengths[b]]
        s = np.einsum("nh,nth->nt", q[b].astype(np.float64), k.astype(np.float64))
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[b] = np.einsum("nt,nth->nh", p / p.sum(axis=1, keepdims=True),
                           v.astype(np.float64))
    return out


def both(q, k_pages, v_pages, lengths, page_indices, pages_per_block):
    """(ours, JAX's) measured runs: outputs, bytes moved, DMA ledger."""
    args = (q, k_pages, v_pages, lengths, page_indices)
    ours = measure(pipelining.paged_attention, *args, pages_per_block=pages_per_block,
                   structure=None)
    theirs = measure(jax_paged, *args, pages_per_compute_block=pages_per_block,
                     structure=None)
    return ours, theirs


def relative(a, b, scale):
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max() / scale)


CASES = [
    pytest.param(4, 4, 2, 8, 4, 2, (1, 32, 13, 0),
                 id="B=4 N=4 K=2 L=8 pages_per_block=2 lengths=1,32,13,0"),
    pytest.param(3, 8, 1, 16, 4, 2, (17, 64, 33), id="B=3 N=8 K=1 L=16 lengths=17,64,33"),
    pytest.param(2, 2, 2, 8, 8, 4, (5, 57), id="B=2 N=K=2 L=8 pages_per_block=4 lengths=5,57"),
]


@pytest.mark.parametrize("B, N, K, L, pages_per_sequence, pages_per_block, lengths", CASES)
def test_ours_is_exact_and_agrees_with_jax_within_its_error(B, N, K, L, pages_per_sequence,
                                                            pages_per_block, lengths):
    H = 128
    q, k_pages, v_pages, page_indices = inputs(B + N + L, B, N, K, H, L, pages_per_sequence)
    lengths = np.asarray(lengths, np.int32)
    expected = attention64(q, k_pages, v_pages, lengths, page_indices)
    scale = np.abs(expected).max()
    ours, theirs = both(q, k_pages, v_pages, lengths, page_indices, pages_per_block)
    assert ours.output.dtype == theirs.output.dtype == jnp.float32
    ours_error = relative(ours.output, expected, scale)
    jax_error = relative(theirs.output, expected, scale)
    assert ours_error <= 2e-4, f"ours vs float64: {ours_error:.2e}"
    assert 1e-3 <= jax_error <= 1e-1, f"JAX's kernel vs float64: {jax_error:.2e} (bf16 K/V)"
    between = relative(ours.output, theirs.output, scale)
    assert between <= 1.05 * jax_error + ours_error, \
        f"ours vs JAX's: {between:.2e}, JAX's own error {jax_error:.2e}"
    for b in np.flatnonzero(lengths == 0):   # an empty sequence: zeros in both
        assert not np.asarray(ours.output)[b].any() and not np.asarray(theirs.output)[b].any()


@pytest.mark.parametrize("B, N, K, L, pages_per_sequence, pages_per_block, lengths", CASES)
def test_on_bf16_exact_pages_the_two_kernels_agree_to_float32_rounding(
        B, N, K, L, pages_per_sequence, pages_per_block, lengths):
    """K and V that bfloat16 holds exactly: JAX's rounding is lossless, so what is left
    is two float32 computations of the same attention."""
    q, k_pages, v_pages, page_indices = inputs(7 * B + L, B, N, K, 128, L, pages_per_sequence)
    k_pages = k_pages.astype(jnp.bfloat16).astype(np.float32)
    v_pages = v_pages.astype(jnp.bfloat16).astype(np.float32)
    lengths = np.asarray(lengths, np.int32)
    scale = np.abs(attention64(q, k_pages, v_pages, lengths, page_indices)).max()
    ours, theirs = both(q, k_pages, v_pages, lengths, page_indices, pages_per_block)
    assert relative(ours.output, theirs.output, scale) <= 1e-5


def test_bf16_inputs_agree_within_bf16_rounding():
    B, N, K, L, pps, ppb = 3, 4, 2, 16, 4, 2
    q, k_pages, v_pages, page_indices = inputs(11, B, N, K, 128, L, pps, jnp.bfloat16)
    lengths = np.array([40, 1, 64], np.int32)
    scale = np.abs(attention64(q, k_pages, v_pages, lengths, page_indices)).max()
    ours, theirs = both(q, k_pages, v_pages, lengths, page_indices, ppb)
    assert ours.output.dtype == theirs.output.dtype == jnp.bfloat16
    assert relative(ours.output, theirs.output, scale) <= 2e-2


def test_ours_fetches_only_pages_that_hold_a_token_jax_whole_blocks():
    """Lengths 1, 32, 13, 0 with pages of 8 tokens and blocks of 2 pages: ours fetches
    1 + 4 + 2 + 0 pages per K/V head for K and for V; JAX's fetches whole blocks,
    2 + 4 + 2 + 0. Both pass the DMA ledger (measure raises on an unmatched copy)."""
    B, N, K, L, pps, ppb, H = 4, 4, 2, 8, 4, 2, 128
    q, k_pages, v_pages, page_indices = inputs(3, B, N, K, H, L, pps)
    lengths = np.array([1, 32, 13, 0], np.int32)
    ours, theirs = both(q, k_pages, v_pages, lengths, page_indices, ppb)
    page = L * H * 4

    def page_bytes(ran):
        return sum(o.bytes for o in ran.traffic.operands if o.name.startswith("DMA "))

    ours_pages = sum(cdiv(n, L) for n in lengths)
    jax_pages = sum(cdiv(n, L * ppb) * ppb for n in lengths)
    assert page_bytes(ours) == 2 * K * ours_pages * page == 2 * K * 7 * page
    assert page_bytes(theirs) == 2 * K * jax_pages * page == 2 * K * 8 * page
    for ran in (ours, theirs):
        counts = ran.counts[0]
        assert counts.dmas_followed and not counts.dma_problems
        assert counts.most_in_flight > 2 * ppb   # the next block lands during this one


@pytest.mark.parametrize("bad, says", [
    (dict(N=4, K=3), "N=4 query heads must be a multiple of the K=3"),
    (dict(pages_per_block=3), "pages_per_sequence=4 must be a multiple of pages_per_block=3"),
    (dict(lengths_dtype=np.float32), "lengths must be int32"),
    (dict(v_H=64), "k_pages and v_pages must both be [K, P, L, H]"),
])
def test_arguments_are_checked_up_front(bad, says):
    N, K = bad.get("N", 4), bad.get("K", 2)
    q, k_pages, v_pages, page_indices = inputs(0, 2, N, K, 128, 8, 4)
    if "v_H" in bad:
        v_pages = v_pages[..., :bad["v_H"]]
    lengths = np.array([8, 3], bad.get("lengths_dtype", np.int32))
    with pytest.raises(ValueError) as info:
        jax.eval_shape(lambda *a: pipelining.paged_attention(
            *a, pages_per_block=bad.get("pages_per_block", 2)),
            q, k_pages, v_pages, lengths, page_indices)
    assert says in str(info.value)
