"""reference/splash.py against JAX's own Pallas TPU splash attention
(jax.experimental.pallas.ops.tpu.splash_attention), both in TPU interpret mode.

* splash_attention against make_splash_mha: causal, local windows, prefix-LM, packed
  documents (JAX's SegmentIds) and random block masks; T != S; grouped-query heads;
  float32 and bfloat16; one mask for every head and one per head. Both are also
  checked against dense masked attention in float64.
* The tables: our block categories, compacted lists (data_next, block_mask) and
  de-duplicated mask blocks (mask_next, the stored blocks) against JAX's MaskInfo
  for the same mask.

JAX's kernel takes one batch element ([N, T, H] and [K, S, H]: a loop here), block
sizes that divide the lengths with block_kv a multiple of 128, and no sm_scale (q is
scaled before it goes in). A query that sees no key gets 0 from ours, and from JAX's
the mean of v or NaN: those rows are compared with the dense truth only.
"""
import importlib.util
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas.ops.tpu import splash_attention as jax_splash
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_mask_info as jax_mask_info)

from pytest_pallas_hints import runtime

ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2}   # relative to max |expected|


def load_reference():
    path = ROOT / "reference" / "splash.py"
    spec = importlib.util.spec_from_file_location("reference_splash", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


splash = load_reference()


@pytest.fixture(autouse=True)
def interpret_mode():
    """TPU interpret mode for every kernel here, as the plugin sets it for learners."""
    runtime.use_interpret_mode(True)


def dense(q, k, v, mask, sm_scale):
    """float64 masked attention, mask [N, T, S]; a query that sees no key gets 0."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    N, K = q.shape[1], k.shape[1]
    heads = [n // (N // K) for n in range(N)]
    s = np.einsum("bnth,bnsh->bnts", q, k[:, heads]) * sm_scale
    s = np.where(mask[None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0))
    l = e.sum(axis=-1, keepdims=True)
    return (e @ v[:, heads]) / np.where(l == 0, 1, l)


def random_block_mask(gen, T, S, block, *, holes):
    """Tiles empty, full or partial at random (partial ones from a pool of three, so
    that patterns repeat); with holes, some queries see no key at all."""
    pool = gen.random((3, block, block)) < 0.5
    kind = gen.integers(-2, 3, (T // block, S // block))
    mask = np.zeros((T, S), bool)
    for i, j in np.ndindex(kind.shape):
        tile = (slice(i * block, (i + 1) * block), slice(j * block, (j + 1) * block))
        mask[tile] = kind[i, j] == -1 if kind[i, j] < 0 else pool[kind[i, j]]
    mask[:, 0] |= not holes
    if holes:
        mask[gen.integers(0, T, 5)] = False
    return mask


CASES = {   # name: (N, K, T, S, dtype)
    "causal": (2, 2, 256, 384, "float32"),
    "local": (2, 1, 256, 256, "bfloat16"),
    "prefix": (4, 2, 384, 256, "float32"),
    "documents": (2, 2, 256, 256, "bfloat16"),
    "random per head": (2, 1, 256, 384, "float32"),
}


def masks_for(case, N, T, S, gen):
    """(our mask [N, T, S], JAX's MultiHeadMask, JAX's SegmentIds or None)."""
    ours = JAX = None
    segments = None
    if case == "causal":
        ours = splash.make_mask(T, S, causal=True)
        JAX = [jax_splash.CausalMask((T, S))] * N
    elif case == "local":
        ours = splash.make_mask(T, S, window=(100, 30))
        JAX = [jax_splash.LocalMask((T, S), window_size=(100, 30), offset=0)] * N
    elif case == "prefix":
        ours = splash.make_mask(T, S, causal=True, prefix=64)
        JAX = [jax_splash.NumpyMask(ours)] * N
    elif case == "documents":
        ids = np.sort(gen.integers(0, 4, T))
        ours = splash.make_mask(T, S, causal=True, segments=(ids, ids))
        JAX = [jax_splash.CausalMask((T, S))] * N
        segments = jax_splash.SegmentIds(q=jnp.asarray(ids), kv=jnp.asarray(ids))
    else:
        per_head = [random_block_mask(gen, T, S, 128, holes=n == 0) for n in range(N)]
        ours = np.stack(per_head)
        JAX = [jax_splash.NumpyMask(m) for m in per_head]
    return np.broadcast_to(ours, (N, T, S)), jax_splash.MultiHeadMask(JAX), segments


@pytest.mark.parametrize("case", list(CASES))
def test_matches_jax_splash_attention(case):
    N, K, T, S, dtype = CASES[case]
    B, H = 2, 128
    gen = np.random.default_rng(len(case) + T + S)
    q = jnp.asarray(gen.standard_normal((B, N, T, H)), dtype)
    k, v = (jnp.asarray(gen.standard_normal((B, K, S, H)), dtype) for _ in range(2))
    mask, jax_mask, segments = masks_for(case, N, T, S, gen)
    sm_scale = 1 / math.sqrt(H)
    theirs_kernel = jax_splash.make_splash_mha(
        jax_mask, block_sizes=jax_splash.BlockSizes(block_q=128, block_kv=128),
        head_shards=1, q_seq_shards=1)
    ours_mask = mask[0] if case not in ("random per head",) else mask

    @jax.jit
    def run_both(q, k, v):
        ours = splash.splash_attention(q, k, v, ours_mask, block_q=128, block_kv=128)
        scaled = (q.astype(jnp.float32) * sm_scale).astype(q.dtype)
        theirs = jnp.stack([theirs_kernel(scaled[b], k[b], v[b], segment_ids=segments)
                            for b in range(B)])   # (its grid semantics do not vmap here)
        return ours, theirs

    ours, theirs = run_both(q, k, v)
    assert ours.dtype == theirs.dtype == jnp.dtype(dtype) and ours.shape == theirs.shape
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    truth = dense(q, k, v, mask, sm_scale)
    seen = np.broadcast_to(mask.any(axis=-1)[None, :, :, None], truth.shape)
    scale = np.abs(truth).max()
    for name, a, b in (("ours - jax", ours, theirs), ("ours - dense", ours, truth),
                       ("jax - dense", theirs, truth)):
        error = np.abs(np.where(seen, a - b, 0)).max() / scale
        assert error <= TOLERANCE[dtype], f"{case}: max |{name}| / max |dense| = {error:.2e}"
    assert not np.isnan(ours).any()
    assert np.all(ours[~seen] == 0), f"{case}: a query that sees no key must output 0"


@pytest.mark.parametrize("case, block_q, block_kv", [
    pytest.param("causal", 128, 128, id="causal T=256 S=384"),
    pytest.param("causal", 64, 128, id="causal block_q=64"),
    pytest.param("local", 128, 128, id="local (100, 30)"),
    pytest.param("random per head", 128, 128, id="random blocks per head"),
])
def test_tables_match_jax_mask_info(case, block_q, block_kv):
    """Our tables against JAX's MaskInfo for the same (NumPy) mask: categories against
    its block mask; the compacted lists against its shrunk grid (a mask shared by every
    head); the stored patterns and each partial step's place in them."""
    N, _, T, S, _ = CASES[case]
    gen = np.random.default_rng(7)
    mask, _, _ = masks_for(case, N, T, S, gen)
    shared = case != "random per head"
    heads = mask[:1] if shared else np.asarray(mask)
    jax_mask = jax_splash.MultiHeadMask([jax_splash.NumpyMask(np.ascontiguousarray(m))
                                         for m in (mask if not shared else mask[:N])])
    full_info, _ = jax_mask_info.process_mask(jax_mask, (block_q, block_kv),
                                              downcast_smem_data=False, shrink_grid=False)
    categories = splash.block_categories(heads, block_q, block_kv)
    np.testing.assert_array_equal(categories, full_info.block_mask)

    data_next, block_mask = splash.compact(categories)
    mask_blocks, block_index = splash.dedup_blocks(heads, block_q, block_kv)
    mask_next = splash.fill_ahead(np.take_along_axis(block_index, data_next, axis=-1),
                                  block_mask == splash.PARTIAL)
    np.testing.assert_array_equal(mask_blocks, full_info.partial_mask_blocks)
    info = full_info
    if shared:   # JAX shrinks the grid of a single mask as compact does
        info, _ = jax_mask_info.process_mask(jax_mask, (block_q, block_kv),
                                             downcast_smem_data=False, shrink_grid=True)
        np.testing.assert_array_equal(block_mask, info.block_mask)
        visited = block_mask != splash.EMPTY
        np.testing.assert_array_equal(data_next[visited], info.data_next[visited])
        partial = block_mask == splash.PARTIAL
        np.testing.assert_array_equal(mask_next[partial], info.mask_next[partial])
    else:        # per head, JAX keeps the full grid: compare at each partial tile
        partial = categories == splash.PARTIAL
        np.testing.assert_array_equal(block_index[partial], info.mask_next[partial])
