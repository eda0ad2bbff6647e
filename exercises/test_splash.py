"""Tests for exercises/splash.py. Run them, don't edit them:

    pytest exercises/test_splash.py                   # all puzzles of the chapter
    pytest exercises/test_splash.py -k skip_empty     # one puzzle
    pytest exercises/test_splash.py -k skip_empty --hint

The table puzzles (categories, families, compact, dedup) compare your NumPy with
the tables the kernel needs, entry by entry. The kernel puzzles compare your
output with masked attention computed in float64 NumPy (a query that sees no key
gets 0), on at least two shapes; count the dot work your kernel executed (only
blocks with a visible key may be computed) and, where the lesson is data
movement, the bytes it moved between HBM and VMEM; then check that the kernel
would compile for a real TPU. Tests marked `tpu` run realistic sizes on a real
TPU and are skipped elsewhere.

Each bfloat16 kernel puzzle has a long configuration (16 kv steps) whose scores all
sit near 100 (a shift softmax does not see): a running max kept in bfloat16 gets the
values visibly wrong there. Any state your kernel carries from step to step in a float
narrower than 32 bits (m, l, acc) is named from the program itself, before it runs.

Masks are NumPy booleans, handed to your functions as they are (never traced):
everything about them is known before the kernel is built. The masks here are
made by the tests themselves, not by your make_mask.
"""
import numpy as np
import pytest

from pytest_pallas_hints import (Structure, chapter, check, check_traffic, check_work,
                                 lowers_for_tpu, measure, tpu_sized)
# The right answers (float64 NumPy, the tables entry by entry) and the inputs drawn:
from pytest_pallas_hints.lessons.splash import (
    EMPTY, FAMILIES, MASKS, PARTIAL, SCORES, attention, categories_of, causal, compacted,
    deduplicated, inputs, padded, random_blocks, tables_for)
# What the kit knows besides: known wrong answers, budgets, the chapter's own checks.
from pytest_pallas_hints.lessons import splash as lesson

splash = chapter("splash")

puzzle = pytest.mark.puzzle
on_tpu = pytest.mark.tpu


# What each kernel lesson requires of your program, checked from its trace: your own
# kernel computes the scores and the softmax, and reads a scalar-prefetched table.
ATTENTION = Structure(inside={"dot_general", "exp"}, prefetch=True)


# 1 -------------------------------------------------------------------------
@puzzle("splash.categories")
@pytest.mark.parametrize("heads, T, S, block_q, block_kv", [
    pytest.param(None, 64, 96, 16, 32, id="T=64 S=96 block_q=16 block_kv=32"),
    pytest.param(3, 48, 48, 16, 8, id="N=3 T=S=48 block_q=16 block_kv=8 (a mask per head)"),
    pytest.param(None, 8, 8, 8, 8, id="T=S=8 (one block)"),
    pytest.param(8, 8192, 8192, 512, 512, id="N=8 T=S=8192-tpu", marks=on_tpu),
])
def test_categories(heads, T, S, block_q, block_kv, rng):
    masks = [random_blocks(rng, T, S, block_q, block_kv, every_row_sees=False)
             for _ in range(heads or 1)]
    mask = np.stack(masks) if heads else masks[0]
    yours = splash.block_categories(mask, block_q, block_kv)
    expected = categories_of(mask, block_q, block_kv)
    check(yours, expected, blocks=(1,) * expected.ndim,
          axes=" ".join(["N"] * (expected.ndim - 2) + ["i", "j"]),
          likely=lesson.categories_mistakes(mask, expected, block_q, block_kv))


# 2 -------------------------------------------------------------------------
def block_structure(B, N, T, S, H, block_q, block_kv):
    return ATTENTION.where(grid=(B, N, T // block_q, S // block_kv),
                           blocks={"q": (None, None, block_q, H), "k": (None, None, block_kv, H),
                                   "constants": (block_q, block_kv)})


@puzzle("splash.skip_empty")
@pytest.mark.parametrize("B, N, T, S, H, block_q, block_kv, shape, dtype", [
    pytest.param(1, 2, 128, 384, 64, 64, 128, "random", "float32",
                 id="B=1 N=2 T=128 S=384 H=64 block_q=64 block_kv=128 random blocks"),
    pytest.param(2, 1, 64, 2048, 128, 64, 128, "prompt", "bfloat16",
                 id="B=2 N=1 T=64 S=2048 H=128 bf16 a long prompt (16 kv steps, the last "
                    "two empty), scores shifted by 100"),
    pytest.param(2, 8, 4096, 4096, 128, 512, 512, "causal", "bfloat16",
                 id="B=2 N=8 T=S=4096 bf16 keys j<=i-tpu", marks=on_tpu),
])
def test_skip_empty(B, N, T, S, H, block_q, block_kv, shape, dtype, rng):
    """Right values; and the work of the non-empty blocks only (an empty block's dots
    are skipped). Scores spread wide (q scaled by 3) so the running max moves; on the
    long prompt, every score of a query shifted by about 100 (softmax does not see it;
    a running max kept in bfloat16 does)."""
    q, k, v = inputs(rng, B, N, N, T, S, H, dtype, **SCORES[shape])
    mask = MASKS[shape](rng, T, S, block_q, block_kv)
    ran = measure(splash.flash_block_mask, q, k, v, mask=mask, block_q=block_q,
                  block_kv=block_kv, structure=block_structure(B, N, T, S, H, block_q, block_kv))
    check(ran, attention(q, k, v, mask).astype(dtype), blocks=(1, 1, block_q, None),
          axes="B N T H", tolerance=1e-4 if dtype == "float32" else None,
          likely=lesson.skip_empty_mistakes(q, k, v, mask, block_q, block_kv, dtype))
    if tpu_sized():
        return
    categories = categories_of(mask, block_q, block_kv)
    visited = int((categories != EMPTY).sum())
    check_work(ran, flops=B * N * lesson.dot_flops(visited, block_q, block_kv, H),
               likely={"every_block": B * N * lesson.dot_flops(categories.size, block_q,
                                                               block_kv, H)})
    lesson.check_full_tiles_unmasked(ran, categories)
    lowers_for_tpu(ran)


@puzzle("splash.skip_empty")
@pytest.mark.parametrize("chunks", [
    pytest.param("partial", id="online_softmax_step: 3 chunks under a mask, rows that see no "
                               "key (in one chunk, in every chunk)"),
    pytest.param("full", id="online_softmax_step: a chunk with no mask (visible=None) between "
                            "two masked ones"),
])
def test_skip_empty_online_softmax_step(chunks, rng):
    """online_softmax_step alone, chunk by chunk, from the running state a kernel starts
    with (m = -inf, l = 0, acc = 0): acc / l is the softmax-weighted mean of v over the
    visible keys, and a row that sees no key in any chunk ends with l == 0 and acc == 0."""
    import jax.numpy as jnp

    R, C, H = 16, 32, 8
    s = rng.normal((3, R, C), scale=3.0)
    v = rng.normal((3, C, H))
    visible = rng.uniform((3, R, C)) < 0.5
    visible[:, :, 0] = True          # every row sees a key in every chunk, but:
    if chunks == "partial":
        visible[:, :4] = False       # rows 0-3 see no key at all
        visible[0, 4:8] = False      # rows 4-7 none in the first chunk
    else:
        visible[1] = True            # the middle chunk is folded with visible=None
    m, l, acc = jnp.full((R, 1), -jnp.inf), jnp.zeros((R, 1)), jnp.zeros((R, H))
    for c in range(3):
        given = None if chunks == "full" and c == 1 else jnp.asarray(visible[c])
        m, l, acc = splash.online_softmax_step(m, l, acc, jnp.asarray(s[c]), jnp.asarray(v[c]),
                                               given)
    l, acc = np.asarray(l, np.float64), np.asarray(acc, np.float64)
    seen = np.concatenate(list(visible), axis=-1)                  # [R, 3C]
    scores = np.where(seen, np.concatenate(list(s), axis=-1), -np.inf)
    values = np.concatenate(list(v), axis=0).astype(np.float64)    # [3C, H]
    sees = seen.any(axis=-1, keepdims=True)
    p = np.where(seen, np.exp(scores - np.where(sees, scores.max(axis=-1, keepdims=True), 0)), 0)
    expected = (p @ values) / np.where(sees, p.sum(axis=-1, keepdims=True), 1)

    check(acc / np.where(l == 0, 1, l), expected, name="acc / l", blocks=(4, None),
          axes="R H", tolerance=1e-4,
          likely=lesson.online_step_mistakes(expected, values, sees))
    lesson.check_unseen_rows_empty(l, acc, sees)


# 3 -------------------------------------------------------------------------
@puzzle("splash.families")
@pytest.mark.parametrize("T, S", [
    pytest.param(24, 40, id="T=24 S=40"),
    pytest.param(33, 17, id="T=33 S=17 (more queries than keys)"),
    pytest.param(8192, 8192, id="T=S=8192-tpu", marks=on_tpu),
])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_families(family, T, S, rng):
    options, expected = FAMILIES[family](T, S, rng)
    yours = splash.make_mask(T, S, **options)
    check(yours, expected, blocks=(8, 8), axes="T S",
          likely=lesson.families_mistakes(options, expected, T, S))


@puzzle("splash.families")
@pytest.mark.parametrize("bad", [
    pytest.param("prefix", id="prefix=4 without causal"),
    pytest.param("segments", id="segment ids of the wrong length"),
])
def test_families_check_their_arguments(bad):
    """A mask that cannot mean what was asked fails with a ValueError, not a guess."""
    T, S = 24, 40
    options, said = ((dict(prefix=4), "prefix=4 without causal=True") if bad == "prefix"
                     else (dict(segments=(np.zeros(T, np.int32), np.zeros(S + 1, np.int32))),
                           f"segments of lengths {T} and {S + 1} for T={T}, S={S}"))
    lesson.check_mask_rejects(splash.make_mask, T, S, options, said)


# 4 -------------------------------------------------------------------------
@puzzle("splash.compact")
@pytest.mark.parametrize("heads, nq, nkv, empty_rows", [
    pytest.param(None, 6, 5, 1, id="6 q blocks x 5 kv blocks, an empty row"),
    pytest.param(3, 4, 7, 2, id="3 tables of 4 x 7, empty rows (one at the start)"),
    pytest.param(None, 1, 1, 0, id="one block"),
    pytest.param(None, 3, 4, 3, id="3 x 4, every tile empty (one step of padding)"),
    pytest.param(16, 64, 64, 4, id="16 tables of 64 x 64-tpu", marks=on_tpu),
])
def test_compact(heads, nq, nkv, empty_rows, rng):
    categories = lesson.random_categories(rng, heads, nq, nkv, empty_rows)
    data_next, block_mask = compacted(categories)
    with lesson.visits_fit(block_mask):   # tables too narrow for a row's visits: named
        yours = splash.compact(categories)
    lesson.returned_pair(yours, "compact returns a tuple of two arrays, (data_next, "
                         "block_mask).")
    lesson.check_width(yours, block_mask)
    axes = " ".join(["N"] * (categories.ndim - 2) + ["i", "j"])
    check(yours[1], block_mask, name="block_mask", axes=axes, blocks=(1,) * block_mask.ndim,
          likely=lesson.block_mask_mistakes(categories, data_next, block_mask))
    likely = lesson.data_next_mistakes(categories, data_next, block_mask)
    lesson.check_padding_entries(yours[0], data_next, block_mask, likely)
    check(yours[0], data_next, name="data_next", axes=axes, blocks=(1,) * block_mask.ndim,
          likely=likely)


# 5 -------------------------------------------------------------------------
def sparse_structure(B, N, T, H, tables):
    block_q, block_kv = tables[3].shape[1:]
    return ATTENTION.where(grid=(B, N, T // block_q, tables[0].shape[-1]),
                           blocks={"q": (None, None, block_q, H), "k": (None, None, block_kv, H),
                                   "mask_blocks": (None, block_q, block_kv)})


@puzzle("splash.sparse_grid")
@pytest.mark.parametrize("B, N, K, T, S, H, block_q, block_kv, shape, store, dtype", [
    pytest.param(1, 4, 2, 128, 512, 64, 64, 128, "random", "every", "float32",
                 id="B=1 N=4 K=2 T=128 S=512 H=64 block_q=64 a mask per head"),
    pytest.param(1, 1, 1, 128, 384, 128, 128, 128, "causal", "distinct", "bfloat16",
                 id="N=K=1 T=128 S=384 H=128 bf16 keys j<=i (one q block, one visit)"),
    pytest.param(1, 2, 1, 64, 2048, 128, 64, 128, "prompt", "distinct", "bfloat16",
                 id="B=1 N=2 K=1 T=64 S=2048 H=128 bf16 long prompts (14 and 9 visits), "
                    "scores shifted by 100"),
    pytest.param(2, 8, 2, 4096, 4096, 128, 512, 512, "causal", "distinct", "bfloat16",
                 id="B=2 N=8 K=2 T=S=4096 bf16 keys j<=i-tpu", marks=on_tpu),
])
def test_sparse_grid(B, N, K, T, S, H, block_q, block_kv, shape, store, dtype, rng):
    """splash_call on tables made here: right values, the work of the visited steps
    only, and K/V bytes of the visited blocks, each copied once where the tables name
    it. The masks are one per head (but the causal one): their lists differ in length,
    so the shorter ones end in padding steps."""
    q, k, v = inputs(rng, B, N, K, T, S, H, dtype, **SCORES[shape])
    if shape == "causal":
        mask = causal(T, S)
    else:
        mask = np.stack([MASKS[shape](rng, T, S, block_q, block_kv, head=n) for n in range(N)])
    tables = tables_for(mask, N, block_q, block_kv, store=store)
    ran = measure(splash.splash_call, q, k, v, *tables, structure=sparse_structure(
        B, N, T, H, tables))
    check(ran, attention(q, k, v, mask).astype(dtype), blocks=(1, 1, block_q, None),
          axes="B N T H", tolerance=1e-4 if dtype == "float32" else None,
          likely=lesson.sparse_grid_mistakes(q, k, v, mask, tables, dtype))
    if tpu_sized():
        return
    block_mask = tables[1]
    steps = B * int((block_mask != EMPTY).sum())
    check_work(ran, flops=lesson.dot_flops(steps, block_q, block_kv, H),
               likely={"padding_steps": lesson.dot_flops(B * block_mask.size, block_q,
                                                         block_kv, H)})
    itemsize = q.dtype.itemsize
    kv = lesson.kv_copies(tables, B, K, block_kv, H, itemsize)
    lesson.check_kv_traffic(ran, k, v, kv)
    check_traffic(ran, reference=2 * q.nbytes + kv + lesson.mask_budget(tables, B),
                  minimum=2 * q.nbytes + lesson.needed_kv(tables, B, K, block_kv, H, itemsize))
    lowers_for_tpu(ran)


# 6 -------------------------------------------------------------------------
@puzzle("splash.dedup")
@pytest.mark.parametrize("heads, T, S, block_q, block_kv, shape", [
    pytest.param(None, 128, 128, 32, 32, "causal", id="T=S=128 block_q=block_kv=32 keys j<=i"),
    pytest.param(2, 96, 160, 32, 32, "random", id="N=2 T=96 S=160 random blocks"),
    pytest.param(None, 64, 128, 16, 32, "window", id="T=64 S=128 block_q=16 block_kv=32 window"),
    pytest.param(None, 64, 64, 16, 16, "symmetric",
                 id="T=S=64 blocks 16 window (8, 8): tiles that mirror each other across "
                    "the diagonal (as many visible keys, other patterns)"),
    pytest.param(None, 32, 64, 32, 32, "full", id="T=32 S=64 nothing partial"),
    pytest.param(8, 8192, 8192, 512, 512, "window", id="N=8 T=S=8192 window-tpu", marks=on_tpu),
])
def test_dedup(heads, T, S, block_q, block_kv, shape, rng):
    masks = [lesson.dedup_mask(rng, shape, T, S, block_q, block_kv) for _ in range(heads or 1)]
    mask = np.stack(masks) if heads else masks[0]
    stored, index = deduplicated(mask, block_q, block_kv)
    categories = categories_of(mask, block_q, block_kv)
    with lesson.stack_fallback(mask, block_q, block_kv):   # np.stack([]): named
        yours = splash.dedup_blocks(mask, block_q, block_kv)
    lesson.returned_pair(yours, "dedup_blocks returns a tuple of two arrays, (mask_blocks, "
                                "block_index).")
    blocks, block_index = (np.asarray(x) for x in yours)
    lesson.check_stored_blocks(blocks, block_index, mask, block_q, block_kv)
    check(blocks, stored, name="mask_blocks", blocks=(1, None, None), axes="P bq bkv",
          likely=lesson.mask_blocks_mistakes(stored))
    lead = " ".join(["N"] * (categories.ndim - 2))
    check(np.where(categories == PARTIAL, block_index, 0), index, name="block_index",
          blocks=(1,) * index.ndim, axes=f"{lead} i j".strip(),
          likely=lesson.block_index_mistakes(categories, index))


# 7 -------------------------------------------------------------------------
@puzzle("splash.multihead")
@pytest.mark.parametrize("B, N, K, T, S, H, block_q, block_kv, shape, dtype", [
    pytest.param(1, 1, 1, 5, 7, 8, 128, 128, "random", "float32",
                 id="T=5 S=7 H=8 blocks of 128 asked (they shrink to 8)"),
    pytest.param(1, 1, 1, 16, 24, 8, 8, 8, "hidden", "float32",
                 id="T=16 S=24 H=8 every key hidden (o = 0, one step of padding)"),
    pytest.param(1, 4, 2, 100, 300, 64, 64, 128, "per head", "float32",
                 id="B=1 N=4 K=2 T=100 S=300 H=64 block_q=64 a mask per head"),
    pytest.param(1, 2, 1, 256, 256, 32, 32, 32, "sliding", "float32",
                 id="B=1 N=2 K=1 T=S=256 H=32 blocks of 32 a sliding window of 40 keys "
                    "(the visits of q block i start at kv block i - 2)"),
    pytest.param(2, 2, 1, 64, 2000, 128, 64, 128, "long", "bfloat16",
                 id="B=2 N=2 K=1 T=64 S=2000 H=128 bf16 one mask (16 kv steps), scores "
                    "shifted by 100"),
    pytest.param(2, 8, 2, 4096, 4096, 128, 512, 512, "sliding", "bfloat16",
                 id="B=2 N=8 K=2 T=S=4096 bf16 sliding window-tpu", marks=on_tpu),
])
def test_multihead(B, N, K, T, S, H, block_q, block_kv, shape, dtype, rng):
    """splash_attention: right values (0 for a query that sees no key); the work of the
    non-empty blocks only; K/V bytes of those blocks, each copied once where the tables
    name it; the mask stored once per distinct partial pattern.

    The masks per head hold, whatever the seed, a full tile, lists of different lengths
    (padding steps), a query that sees no key and tiles that hang off T and S. The
    sliding window's lists start past kv block 0 (a partial step's stored block must be
    looked up at the kv block it visits); the short configuration asks for blocks of 128
    (splash_attention shrinks them before padding); a mask with every key hidden still
    has one (padding) step."""
    q, k, v = inputs(rng, B, N, K, T, S, H, dtype,
                     **(dict(scale=1.0, shift=100.0) if shape == "long" else dict(scale=3.0)))
    mask = lesson.multihead_mask(rng, shape, T, S, sliding=1024 if tpu_sized() else 40)
    asked = dict(block_q=block_q, block_kv=block_kv)   # splash_attention shrinks them
    block_q, T_padded = padded(T, block_q)
    block_kv, S_padded = padded(S, block_kv)
    heads = mask if mask.ndim == 3 else mask[None]
    heads = np.pad(heads, ((0, 0), (0, T_padded - T), (0, S_padded - S)))
    tables = tables_for(heads, N, block_q, block_kv)
    structure = ATTENTION.where(grid=(B, N, T_padded // block_q, tables[0].shape[-1]),
                                outside={"pad", "slice"})
    ran = measure(splash.splash_attention, q, k, v, mask=mask, **asked, structure=structure)
    check(ran, attention(q, k, v, mask).astype(dtype), blocks=(1, 1, block_q, None),
          axes="B N T H", tolerance=1e-4 if dtype == "float32" else None,
          likely=lesson.multihead_mistakes(q, k, v, mask, heads, tables, dtype))
    if tpu_sized() or shape not in ("per head", "sliding"):
        return
    block_mask = tables[1]
    check_work(ran, flops=lesson.dot_flops(B * int((block_mask != EMPTY).sum()), block_q,
                                           block_kv, H))
    itemsize = q.dtype.itemsize
    kv = lesson.kv_copies(tables, B, K, block_kv, H, itemsize)
    lesson.check_kv_traffic(ran, k, v, kv)
    lesson.check_mask_store(ran, tables)
    q_bytes = B * N * T_padded * H * itemsize
    check_traffic(ran, reference=2 * q_bytes + kv + lesson.mask_budget(tables, B),
                  minimum=2 * q_bytes + lesson.needed_kv(tables, B, K, block_kv, H, itemsize))
    lowers_for_tpu(ran)


@puzzle("splash.multihead")
@pytest.mark.parametrize("bad", [
    pytest.param("heads", id="N=4 K=3 (K does not divide N)"),
    pytest.param("mask", id="mask [T, S + 1]"),
    pytest.param("block", id="block_q=100 (not a multiple of 8)"),
])
def test_multihead_checks_its_arguments(bad, rng):
    """Bad arguments fail up front, with a ValueError, not deep inside a kernel."""
    N, K, T, S, H = 4, 3 if bad == "heads" else 2, 64, 64, 32
    q, k, v = inputs(rng, 1, N, K, T, S, H)
    mask = causal(T, S + 1 if bad == "mask" else S)
    block_q = 100 if bad == "block" else 128
    said = {"heads": f"N={N}, K={K}", "mask": f"mask of shape {mask.shape}",
            "block": f"block_q={block_q}"}[bad]
    lesson.check_attention_rejects(splash.splash_attention, said, q, k, v, mask=mask,
                                   block_q=block_q)
