"""The flash chapter's lesson machinery (pytest_pallas_hints/lessons/flash.py) on its own:
the causal schedule's models, float64 attention and its gradients with their switches,
the known-wrong answers, and the budgets of work and bytes, each against a small case
worked by hand or an independent computation (reference/flash.py run in JAX, its kernels
measured, a known mistake's functions run in their place)."""
import math
import types
from pathlib import Path

import jax
import numpy as np
import pytest

from pytest_pallas_hints import Rng, runtime
from pytest_pallas_hints.checking import Diagnosed, measure
from pytest_pallas_hints.lessons import flash as lesson

ROOT = Path(__file__).resolve().parents[2]


def reference(*mistakes):
    """reference/flash.py as a module of its own, the functions of the known mistakes
    tests/mistakes/flash/<name>.py in place of the reference's (as --pallas-patch)."""
    module = types.ModuleType("reference_flash_" + "_".join(mistakes))
    for path in [ROOT / "reference" / "flash.py",
                 *(ROOT / "tests" / "mistakes" / "flash" / f"{m}.py" for m in mistakes)]:
        module.__file__ = str(path)
        exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


REFERENCE = reference()


@pytest.fixture(autouse=True)
def interpret_mode():
    runtime.use_interpret_mode(True)


@pytest.fixture(autouse=True)
def no_chapter_loaded(monkeypatch):
    """The kernels here come from files the tests load themselves."""
    from pytest_pallas_hints import chapters

    monkeypatch.setattr(chapters, "_loaded", set())


def close(yours, expected, rtol=1e-5):
    np.testing.assert_allclose(np.asarray(yours, np.float64), np.asarray(expected, np.float64),
                               rtol=rtol, atol=rtol, equal_nan=True)


# --- the causal schedule ---------------------------------------------------------

@pytest.mark.parametrize("T, S, block_q, block_kv", [
    (256, 384, 128, 64), (256, 256, 64, 128), (9, 16, 9, 8), (128, 128, 128, 128)])
def test_visible_blocks_are_the_tiles_with_a_visible_key(T, S, block_q, block_kv):
    """A tile is computed where some query of it sees some key of it (col <= row)."""
    visible = np.tril(np.ones((T, S), bool))
    tiles = visible.reshape(T // block_q, block_q, S // block_kv, block_kv).any(axis=(1, 3))
    assert lesson.visible_blocks(T, S, block_q, block_kv) == list(zip(*np.nonzero(tiles)))
    assert len(lesson.visible_blocks(T, S, block_q, block_kv, causal=False)) == tiles.size


def test_visible_blocks_by_hand():
    assert lesson.visible_blocks(256, 384, 128, 64) == [(0, 0), (0, 1), (1, 0), (1, 1),
                                                        (1, 2), (1, 3)]


def test_kv_fetches_by_hand():
    """T = S = 256 in blocks of 128: clamped, the kv index runs 0, 0 | 0, 1 (2 fetches);
    not causal, 0, 1 | 0, 1 (4)."""
    assert lesson.kv_fetches(256, 256, 128, 128) == 2
    assert lesson.kv_fetches(256, 256, 128, 128, causal=False) == 4
    # block_kv = 64: q block 0 needs kv 0, 1; q block 1 kv 0..3: 0 1 1 1 1 1 | 0 1 2 3 3 3
    assert lesson.kv_fetches(256, 384, 128, 64) == 6


def test_dot_flops_by_hand():
    assert lesson.dot_flops(3, 2, 8, 16, 4) == 3 * 2 * (2 * 8 * 16 * 4)


# --- attention in float64 --------------------------------------------------------

def test_attention_is_the_reference_dense_attention(rng):
    q, k, v = lesson.inputs(rng, 2, 4, 2, 24, 40, 16)
    for causal in (False, True):
        o, lse = lesson.attention(q, k, v, causal=causal)
        close(o, jax.jit(REFERENCE.attention, static_argnames="causal")(q, k, v, causal=causal),
              rtol=1e-5)
        s = lesson.scores(q, k, causal=causal)[0]
        with np.errstate(divide="ignore"):
            close(lse, np.log(np.exp(s).sum(axis=-1)))


def test_score_options_by_hand(rng):
    """causal keeps keys j <= i + diagonal, kv_len keys j < kv_len; sm_scale scales;
    head_of picks the K/V head of each query head."""
    q, k, v = lesson.inputs(rng, 1, 4, 2, 3, 5, 8)
    s, heads = lesson.scores(q, k, causal=True, kv_len=3, diagonal=1)
    assert heads == [0, 0, 1, 1]
    assert np.isfinite(s[0, 0]).tolist() == [[True, True, False, False, False],
                                             [True, True, True, False, False],
                                             [True, True, True, False, False]]
    close(lesson.scores(q, k, sm_scale=1.0)[0] / math.sqrt(8), lesson.scores(q, k)[0])
    modulo = [0, 1, 0, 1]
    assert lesson.scores(q, k, head_of=lambda n: n % 2)[1] == modulo
    close(lesson.attention(q, k, v, head_of=lambda n: n % 2)[0],
          lesson.attention(q, k[:, modulo], v[:, modulo])[0])
    close(lesson.attention(q, k, v, kv_len=3)[0], lesson.attention(q, k[:, :, :3],
                                                                     v[:, :, :3])[0])


def test_attention_grads_are_jax_grad_of_the_reference(rng):
    q, k, v = lesson.inputs(rng, 1, 4, 2, 16, 24, 8)
    do = rng.normal((1, 4, 16, 8))
    for causal in (False, True):
        _, vjp = jax.vjp(lambda q, k, v: REFERENCE.attention(q, k, v, causal=causal), q, k, v)
        dq, dk, dv = vjp(do)
        grads = lesson.attention_grads(q, k, v, do, causal=causal)
        close(grads[0], dq, rtol=1e-4)
        close(lesson.per_group(grads[1], 2), dk, rtol=1e-4)
        close(lesson.per_group(grads[2], 2), dv, rtol=1e-4)


def test_attention_grads_without_delta_miss_the_row_term(rng):
    """delta=False leaves out -P * delta, delta = rowsum(dO * O), from dS."""
    q, k, v = lesson.inputs(rng, 1, 2, 2, 8, 12, 4)
    do = rng.normal((1, 2, 8, 4))
    right, wrong = (lesson.attention_grads(q, k, v, do, delta=d) for d in (True, False))
    s = lesson.scores(q, k)[0]
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = p @ np.asarray(v, np.float64)
    delta = (np.asarray(do, np.float64) * o).sum(axis=-1, keepdims=True)
    close(wrong[0] - right[0], (p * delta) @ np.asarray(k, np.float64) / 2)   # sqrt(H) = 2
    close(wrong[2], right[2])   # dV has no dS in it


def test_per_group_and_strided_group_by_hand():
    x = np.arange(6.0).reshape(1, 6, 1, 1)    # query heads 0..5, K = 2: groups of 3
    assert lesson.per_group(x, 2).ravel().tolist() == [0 + 1 + 2, 3 + 4 + 5]
    assert lesson.strided_group(x, 2).ravel().tolist() == [0 + 2 + 4, 1 + 3 + 5]


def test_inputs_shapes(rng):
    q, k, v = lesson.inputs(rng, 2, 4, 2, 3, 5, 8, "bfloat16")
    assert q.shape == (2, 4, 3, 8) and k.shape == v.shape == (2, 2, 5, 8)
    assert {str(x.dtype) for x in (q, k, v)} == {"bfloat16"}


# --- the online recurrence ---------------------------------------------------------

def test_online_variants_by_hand(rng):
    """Rescaled, the recurrence is attention; one chunk needs no rescaling; over two
    chunks, each switch leaves out exp(m1 - m2) where it says."""
    q, k, v = rng.normal((4, 8), scale=3.0), rng.normal((16, 8)), rng.normal((16, 8))
    exact = lesson.attention(q[None, None], k[None, None], v[None, None])[0][0, 0]
    close(lesson.online_variants(q, k, v, 8, rescale_l=True, rescale_acc=True), exact)
    for l, acc in ((False, False), (True, False), (False, True)):
        close(lesson.online_variants(q, k, v, 16, rescale_l=l, rescale_acc=acc), exact)
    s = np.asarray(q, np.float64) @ np.asarray(k, np.float64).T / math.sqrt(8)
    m1, m2 = s[:, :8].max(1, keepdims=True), s.max(1, keepdims=True)
    p1, p2 = np.exp(s[:, :8] - m1), np.exp(s[:, 8:] - m2)
    alpha = np.exp(m1 - m2)
    for rescale_l, rescale_acc in ((False, False), (True, False), (False, True)):
        l = (alpha if rescale_l else 1) * p1.sum(1, keepdims=True) + p2.sum(1, keepdims=True)
        acc = (alpha if rescale_acc else 1) * (p1 @ v[:8]) + p2 @ v[8:]
        close(lesson.online_variants(q, k, v, 8, rescale_l=rescale_l,
                                     rescale_acc=rescale_acc), acc / l)


# --- the known wrong answers against the known mistakes -----------------------------

def measured(function, *args, **static):
    return np.asarray(measure(function, *args, structure=None, **static).output)


def run_jax(function, *args, **static):
    return np.asarray(jax.jit(lambda *a: function(*a, **static))(*args))


@pytest.mark.parametrize("known, likely", [("dense_no_scale", "no_scale"),
                                             ("dense_scale_one_over_h", "scale_one_over_h")])
def test_dense_mistakes_are_the_mistakes(known, likely, rng):
    q, k, v = lesson.inputs(rng, 1, 4, 2, 24, 40, 16)
    yours = run_jax(reference(known).attention, q, k, v, causal=True)
    close(yours, lesson.dense_mistakes(q, k, v, True, q.dtype)[likely](), rtol=1e-4)


def test_dense_mistakes_by_hand(rng):
    q, k, v = lesson.inputs(rng, 1, 4, 2, 24, 40, 16)
    likely = lesson.dense_mistakes(q, k, v, True, np.float64)
    close(likely["scale_sqrt_h"](), lesson.attention(q * 16.0, k, v, causal=True)[0])
    close(likely["mask_ignored"](), lesson.attention(q, k, v)[0])
    row, col = np.arange(24)[:, None], np.arange(40)[None, :]
    bottom_right = lesson.scores(q, k)[0]   # the last query sees the last key
    bottom_right = np.where(col <= row + 16, bottom_right, -np.inf)
    e = np.exp(bottom_right - bottom_right.max(-1, keepdims=True))
    expected = (e / e.sum(-1, keepdims=True)) @ np.asarray(v, np.float64)[:, [0, 0, 1, 1]]
    close(likely["bottom_right"](), expected)


def test_online_mistake_is_the_mistake(rng):
    q, k, v = rng.normal((16, 32), scale=3.0), rng.normal((257, 32)), rng.normal((257, 32))
    yours = run_jax(reference("online_no_rescale").online_attention, q, k, v, block_kv=128)
    likely = lesson.online_mistakes(q, k, v, 128)
    close(yours, likely["no_rescale"](), rtol=1e-4)
    last = lesson.attention(q[None, None], k[None, None, 256:], v[None, None, 256:])[0]
    close(likely["last_chunk_only"](), last[0, 0])


def test_kv_loop_mistakes(rng):
    q, k, v = rng.normal((128, 64)), rng.normal((256, 64)), rng.normal((256, 64))
    yours = measured(reference("kv_loop_unnormalised").flash_one_head, q, k, v, block_q=128,
                     block_kv=128)
    likely = lesson.kv_loop_mistakes(q, k, v, 128)
    close(yours, likely["unnormalised"](), rtol=1e-4)
    one = (None, None)
    close(likely["first_kv_block_only"](),
          lesson.attention(q[one], k[:128][one], v[:128][one])[0][0, 0])
    close(likely["no_scale"](), lesson.attention(q[one] * 8.0, k[one], v[one])[0][0, 0])


def test_grid_mistakes_by_hand(rng):
    q, k, v = lesson.inputs(rng, 1, 1, 1, 128, 384, 32)
    likely = lesson.grid_mistakes(q, k, v)
    close(likely["last_kv_block_only"](), lesson.attention(q, k[:, :, 256:], v[:, :, 256:])[0])
    close(likely["first_kv_block_dropped"](),
          lesson.attention(q, k[:, :, 128:], v[:, :, 128:])[0])
    close(likely["no_scale"](), lesson.attention(q * np.sqrt(32.0), k, v)[0])


@pytest.mark.parametrize("known, likely", [
    ("causal_diagonal_excluded", "diagonal_excluded"),
    ("causal_unmasked_diagonal", "unmasked_diagonal_blocks"),
])
@pytest.mark.parametrize("T, S, block_q, block_kv", [(256, 384, 128, 64), (9, 16, 9, 8)])
def test_causal_mistakes_are_the_mistakes(known, likely, T, S, block_q, block_kv):
    q, k, v = lesson.inputs(Rng(1), 1, 1, 1, T, S, 64)
    yours = measured(reference(known).flash_causal, q, k, v, block_q=block_q,
                     block_kv=block_kv)
    close(yours, lesson.causal_mistakes(q, k, v, block_q, block_kv)[likely](), rtol=1e-4)


def test_causal_mistakes_by_hand(rng):
    q, k, v = lesson.inputs(rng, 1, 1, 1, 16, 24, 8)
    likely = lesson.causal_mistakes(q, k, v, 8, 8)
    close(likely["mask_ignored"](), lesson.attention(q, k, v)[0])
    close(likely["bottom_right"](), lesson.attention(q, k, v, causal=True, diagonal=8)[0])
    # row and column counted from each block's start: query 9, row 1 of q block 1,
    # visits kv blocks 0 and 1 and sees columns 0 and 1 of each: keys 0, 1, 8, 9
    keep = [c for c in range(24) if c // 8 <= 1 and c % 8 <= 1]
    close(likely["mask_block_local"]()[0, 0, 9],
          lesson.attention(q[:, :, 9:10], k[:, :, keep], v[:, :, keep])[0][0, 0, 0])


def test_logsumexp_mistakes_are_the_mistakes(rng):
    q, k, v = lesson.inputs(rng, 2, 1, 1, 256, 256, 64)
    o, lse = (np.asarray(x) for x in measure(
        reference("logsumexp_kv_len_inclusive").flash_forward, q, k, v, causal=True,
        kv_len=200, block_q=128, block_kv=128, structure=None).output)
    close(o, lesson.logsumexp_mistakes(q, k, v, True, 200, q.dtype)["kv_len_inclusive"](),
          rtol=1e-4)
    _, lse = (np.asarray(x) for x in measure(
        reference("logsumexp_without_max").flash_forward, q, k, v, causal=True,
        kv_len=200, block_q=128, block_kv=128, structure=None).output)
    close(lse, lesson.lse_mistakes(q, k, True, 200)["lse_without_max"](), rtol=1e-4)
    likely = lesson.lse_mistakes(q, k, True, 200)
    close(likely["max_only"]() + likely["lse_without_max"](),
          lesson.attention(q, k, v, causal=True, kv_len=200)[1], rtol=1e-5)
    close(lesson.logsumexp_mistakes(q, k, v, True, 200, np.float64)["padding_not_masked"](),
          lesson.attention(q, k, v, causal=True)[0])


def test_backward_mistake_is_the_mistake(rng):
    B, N, T, S, H = 1, 1, 128, 256, 64
    q, k, v = lesson.inputs(rng, B, N, N, T, S, H)
    do = rng.normal((B, N, T, H))
    o, lse = lesson.attention(q, k, v, causal=True)
    yours = measure(reference("backward_no_delta").flash_backward, q, k, v,
                    o.astype(np.float32), lse.astype(np.float32), do, causal=True,
                    block_q=128, block_kv=128, structure=None).output
    likely = lesson.backward_mistakes(q, k, v, do, np.float32, causal=True)
    for n in range(3):
        close(yours[n], likely[n]["no_delta"](), rtol=1e-4)


def test_gqa_mistakes(rng):
    q, k, v = lesson.inputs(rng, 1, 4, 2, 100, 71, 64)
    yours = measured(reference("gqa_head_modulo").flash_attention, q, k, v, causal=True)
    likely = lesson.gqa_mistakes(q, k, v, True, q.dtype)
    close(yours, likely["head_modulo"](), rtol=1e-4)
    # S = 71 in one block of 72: one zero key, seen by every query
    pad = ((0, 0), (0, 0), (0, 1), (0, 0))
    close(likely["padding_not_masked"](),
          lesson.attention(q, np.pad(k, pad), np.pad(v, pad), causal=True)[0], rtol=1e-6)


def test_group_mistakes(rng):
    B, N, K, T, S, H = 1, 4, 2, 64, 64, 64
    q, k, v = lesson.inputs(rng, B, N, K, T, S, H)
    do = rng.normal((B, N, T, H))

    mistaken = reference("gqa_group_not_summed")

    def with_grads(q, k, v, do):
        o, vjp = jax.vjp(lambda q, k, v: mistaken.flash_attention(q, k, v, causal=True),
                         q, k, v)
        return (o, *vjp(do))

    yours = measure(with_grads, q, k, v, do, structure=None).output
    expected = lesson.attention_grads(q, k, v, do, causal=True)
    for n in (1, 2):
        likely = lesson.group_mistakes(expected, n, K, np.float32)
        close(yours[n + 1], likely["last_head_only"](), rtol=1e-4)
        close(likely["first_head_only"](), expected[n][:, [0, 2]])
        close(likely["dk_dv_swapped"](), lesson.per_group(expected[3 - n], K))
        close(likely["group_heads_strided"](), expected[n][:, [0, 1]] + expected[n][:, [2, 3]])


# --- budgets, against the reference kernels measured ----------------------------------

@pytest.mark.parametrize("B, N, T, S, H, block_q, block_kv", [
    (1, 1, 256, 384, 64, 128, 64), (2, 1, 256, 256, 64, 64, 128), (1, 2, 9, 16, 64, 9, 8)])
def test_causal_budgets_are_what_the_reference_moves(B, N, T, S, H, block_q, block_kv):
    q, k, v = lesson.inputs(Rng(0), B, N, N, T, S, H)
    ran = measure(REFERENCE.flash_causal, q, k, v, block_q=block_q, block_kv=block_kv,
                  structure=None)
    visible = len(lesson.visible_blocks(T, S, block_q, block_kv))
    assert ran.work == lesson.dot_flops(B * N * visible, 2, block_q, block_kv, H)
    reference, minimum = lesson.causal_traffic(q, k, block_q, block_kv)
    assert ran.traffic.total == reference
    kv_block = block_kv * H * 4
    assert ran.bytes_from(k) == B * N * lesson.kv_fetches(T, S, block_q, block_kv) * kv_block
    # the minimum: q, o, and the K/V blocks some query sees (a block starting past the
    # last query is seen by none)
    seen = len({j for _, j in lesson.visible_blocks(T, S, block_q, block_kv)})
    assert minimum == 2 * q.nbytes + 2 * B * N * seen * kv_block


def test_backward_budget_is_what_the_reference_moves(rng):
    B, N, T, S, H = 2, 1, 256, 384, 64
    q, k, v = lesson.inputs(rng, B, N, N, T, S, H)
    do = rng.normal((B, N, T, H))
    o, lse = lesson.attention(q, k, v, causal=True, kv_len=200)
    ran = measure(REFERENCE.flash_backward, q, k, v, o.astype(np.float32),
                  lse.astype(np.float32), do, causal=True, kv_len=200, block_q=128,
                  block_kv=128, structure=None)
    needed, minimum = lesson.backward_traffic(B, N, H)
    assert ran.traffic.total == needed
    tile, row = 128 * H * 4, 128 * 4
    # every input read once (q, dO: 2 tiles each; K, V: 3; lse, delta: 2 rows each),
    # dq, dk, dv written once (2 + 3 + 3 tiles)
    assert minimum == B * N * ((2 * 2 + 2 * 3) * tile + 2 * 2 * row + (2 + 3 + 3) * tile)
    visible = len(lesson.visible_blocks(T, S, 128, 128))
    assert ran.work == lesson.dot_flops(B * N * visible, 7, 128, 128, H)


# --- the chapter's own check ---------------------------------------------------------

def test_check_attention_rejects(rng):
    q, k, v = lesson.inputs(rng, 1, 4, 3, 128, 128, 64)
    lesson.check_attention_rejects(REFERENCE.flash_attention, "N=4, K=3", q, k, v)

    def raises_nothing(q, k, v, **static):
        return q

    def fails_inside(q, k, v, **static):
        raise IndexError("deep inside a kernel")

    for function, words in ((raises_nothing, "it raised nothing"),
                            (fails_inside, "it failed later, inside JAX")):
        with pytest.raises(Diagnosed) as failed:
            lesson.check_attention_rejects(function, "N=4, K=3", q, k, v, block_q=128)
        assert failed.value.kind == "argument_check"
        assert words in failed.value.says
