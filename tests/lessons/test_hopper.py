"""pytest_pallas_hints/lessons/hopper.py on its own: the attention model and its known
wrong variants against loops written here, which K/V head each query head read, the
KV blocks and K steps a walk's wgmma counts imply (worked out by hand), the layout
transforms' check, and the readers of the traced kernel (SMEM, TMA, the pipeline's
buffers, barriers) on the reference and on known mistakes, in GPU interpret mode."""
import functools
import importlib.util
import math
import types
from pathlib import Path

import numpy as np
import pytest

from pytest_pallas_hints import jaxcompat, runtime
from pytest_pallas_hints.checking import Diagnosed, check_rejects, measure
from pytest_pallas_hints.lessons import hopper as lesson

ROOT = Path(__file__).resolve().parents[2]


def kind(check, *args, **kwargs) -> str:
    """The finding kind of a lesson check ('' where it passes)."""
    try:
        check(*args, **kwargs)
    except Diagnosed as failure:
        return failure.kind
    return ""


# --- the attention model and its known wrong variants --------------------------------

def attention_by_loops(q, k, v, causal, kv_head):
    """Softmax attention one (batch, head, query) at a time, in float64."""
    B, N, T, H = q.shape
    S = k.shape[2]
    out = np.zeros((B, N, T, H))
    for b in range(B):
        for n in range(N):
            for t in range(T):
                keys = range(t + 1) if causal else range(S)
                s = np.array([q[b, n, t] @ k[b, kv_head(n), j] for j in keys]) / math.sqrt(H)
                p = np.exp(s - s.max())
                out[b, n, t] = (p / p.sum()) @ v[b, kv_head(n), list(keys)]
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_attention_f64_is_softmax_attention_with_shared_heads(causal):
    gen = np.random.default_rng(0)
    q = gen.standard_normal((2, 4, 5, 8))
    k, v = gen.standard_normal((2, 2, 5, 8)), gen.standard_normal((2, 2, 5, 8))
    np.testing.assert_allclose(lesson.attention_f64(q, k, v, causal),
                               attention_by_loops(q, k, v, causal, lambda n: n // 2),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lesson.attention_f64_heads(q, k, v, causal, lambda n: n % 2),
                               attention_by_loops(q, k, v, causal, lambda n: n % 2),
                               rtol=1e-12, atol=1e-12)


def test_attention_not_rescaled_by_hand():
    """One query, two KV blocks of one key: scores 0 then log 3 (the max moves). acc
    sums exp(0 - 0) * v0 + exp(log 3 - log 3) * v1 = v0 + v1; l is rescaled: 1/3 + 1."""
    H = 4
    q = np.zeros((1, 1, 1, H))
    q[..., 0] = math.log(3) * math.sqrt(H)
    k = np.zeros((1, 1, 2, H))
    k[0, 0, 1, 0] = 1.0                       # scores: 0, log 3
    v = np.zeros((1, 1, 2, H))
    v[0, 0, 0, 1], v[0, 0, 1, 2] = 1.0, 1.0
    wrong = lesson.attention_not_rescaled(q, k, v, False, 1)
    np.testing.assert_allclose(wrong[0, 0, 0], [0, 1 / (4 / 3), 1 / (4 / 3), 0])
    right = lesson.attention_f64(q, k, v, False)
    np.testing.assert_allclose(right[0, 0, 0], [0, 1 / 4, 3 / 4, 0])
    # one KV block: nothing to rescale, the right answer
    np.testing.assert_allclose(lesson.attention_not_rescaled(q, k, v, False, 2), right)


def test_attention_not_rescaled_is_right_with_one_kv_block_and_finite_under_a_mask():
    gen = np.random.default_rng(1)
    q, k, v = (gen.standard_normal((1, 1, 4, 8)) for _ in range(3))
    assert np.isfinite(lesson.attention_not_rescaled(q, k, v, True, 1)).all()
    np.testing.assert_allclose(lesson.attention_not_rescaled(q, k, v, True, 4),
                               lesson.attention_f64(q, k, v, True), rtol=1e-12)


@pytest.mark.parametrize("read, expected", [
    (lambda n: n // 2, ""),                   # right
    (lambda n: n % 2, "kv_head_mod"),         # heads 1 and 2 swapped
    (lambda n: (n // 2 + 1) % 2, "kv_head"),  # every head the other group's
])
def test_check_kv_heads_read_names_the_head_each_query_head_read(read, expected):
    gen = np.random.default_rng(2)
    q = gen.standard_normal((1, 4, 8, 8)).astype(np.float32)
    k, v = (gen.standard_normal((1, 2, 8, 8)).astype(np.float32) for _ in range(2))
    ran = types.SimpleNamespace(output=lesson.attention_f64_heads(q, k, v, True, read))
    assert kind(lesson.check_kv_heads_read, ran, q, k, v, True) == expected


def test_check_kv_heads_read_leaves_what_no_head_explains_to_check():
    gen = np.random.default_rng(3)
    q = gen.standard_normal((1, 4, 8, 8)).astype(np.float32)
    k, v = (gen.standard_normal((1, 2, 8, 8)).astype(np.float32) for _ in range(2))
    ran = types.SimpleNamespace(output=np.zeros(q.shape, np.float32))
    assert kind(lesson.check_kv_heads_read, ran, q, k, v, True) == ""


# --- what the walk's wgmma counts imply ------------------------------------------------

def walked(monkeypatch, wgmmas):
    """The lesson's gpu_walk.run finds these wgmma counts per block."""
    found = types.SimpleNamespace(wgmmas=wgmmas, outside=[], unwaited=[])
    monkeypatch.setattr(lesson, "gpu_walk", types.SimpleNamespace(walk=lambda call: found))
    return types.SimpleNamespace(program=types.SimpleNamespace(
        sites=[types.SimpleNamespace(call=None)]))


@pytest.mark.parametrize("counts, expected", [
    ((4, 8), ""),              # T=S=256, block_q=128, block_kv=64: 2 then 4 KV blocks
    ((8, 8), "kv_steps"),      # every KV block visited
    ((2, 4), "kv_steps"),      # q blocks counted, not KV blocks
])
def test_check_kv_blocks_visited_by_hand_causal(monkeypatch, counts, expected):
    ran = walked(monkeypatch, {(0, 0, 0): counts[0], (0, 0, 1): counts[1]})
    assert kind(lesson.check_kv_blocks_visited, ran, T=256, S=256, block_q=128, block_kv=64,
                causal=True) == expected


def test_check_kv_blocks_visited_by_hand_not_causal(monkeypatch):
    ran = walked(monkeypatch, {(0, 0, 0): 4, (0, 0, 1): 4})   # S=128, block_kv=64: 2 blocks
    assert kind(lesson.check_kv_blocks_visited, ran, T=128, S=128, block_q=64, block_kv=64,
                causal=False) == ""
    ran = walked(monkeypatch, {(0, 0, 0): 4, (0, 0, 1): 2})
    assert kind(lesson.check_kv_blocks_visited, ran, T=128, S=128, block_q=64, block_kv=64,
                causal=False) == "kv_steps"


def test_check_k_steps_by_hand(monkeypatch):
    ran = walked(monkeypatch, {(0, 0): 4, (0, 1): 4})
    assert kind(lesson.check_k_steps, ran, K=256, tile_k=64) == ""
    assert kind(lesson.check_k_steps, ran, K=256, tile_k=128) == "k_steps"


class Swizzle:
    def __init__(self, swizzle):
        self.swizzle = swizzle


class Tiling:
    def __init__(self, tiling):
        self.tiling = tiling


@pytest.mark.parametrize("cols, dtype, swizzle, tiling, expected", [
    (64, "float16", 128, (8, 64), ""),                  # a row of 128 bytes
    (32, "bfloat16", 64, (8, 32), ""),                  # 64 bytes
    (48, "float16", 32, (8, 16), ""),                   # 96 bytes: only 32 divides it
    (64, "float16", 32, (8, 16), "swizzle_not_widest"),
    (64, "float16", 128, (8, 128), "tiling_in_bytes"),
])
def test_check_wgmma_transforms_by_hand(cols, dtype, swizzle, tiling, expected):
    def transforms(c, d):
        return (Tiling(tiling), Swizzle(swizzle))

    assert kind(lesson.check_wgmma_transforms, transforms, cols, dtype) == expected


def test_check_rejects_shows_a_dtype_argument():
    """hopper.wgmma's argument test passes dtype=np.float16, a class with shape and
    dtype attributes: shown by its repr, not taken for an array."""
    with pytest.raises(Diagnosed) as failed:
        check_rejects(lambda cols, dtype: None, [("no swizzle", (), {
            "cols": 4, "dtype": np.float16}, None)], advice="Check them first.")
    assert failed.value.kind == "bad_arguments"
    assert "dtype=<class 'numpy.float16'>" in failed.value.says
    assert failed.value.says.endswith("it raised nothing. Check them first.")


# --- the traced kernel's readers, on the reference and on known mistakes ----------------

def chapter(wrong=None):
    """reference/hopper.py as a module, with tests/mistakes/hopper/<wrong>.py patched in."""
    spec = importlib.util.spec_from_file_location("reference_hopper_lesson",
                                                  ROOT / "reference" / "hopper.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if wrong:
        path = ROOT / "tests" / "mistakes" / "hopper" / f"{wrong}.py"
        exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


@pytest.fixture
def gpu_interpret_mode():
    for feature in ("tma", "pipeline", "warpgroups"):
        why = jaxcompat.gpu_interpret_missing(feature)
        if why:
            raise jaxcompat.CannotVerify(jaxcompat.GPU_INTERPRET, why)
    runtime.use_interpret_mode(True)
    with runtime.mosaic_gpu(compiled=False):
        yield


X = np.random.default_rng(4).standard_normal((128, 64)).astype(np.float32)


@pytest.mark.parametrize("wrong, expected", [
    (None, ""), ("first_kernel_no_smem", "no_smem"), ("first_kernel_tile_unused", "smem_unused")])
def test_smem_readers_on_first_kernel(gpu_interpret_mode, wrong, expected):
    ran = measure(functools.partial(chapter(wrong).add_one, block_rows=64), X, structure=None)

    def both():
        lesson.check_smem_tile(ran, (64, 64), "the block's result")
        lesson.check_smem_used(ran, "through the tile")

    assert kind(both) == expected


@pytest.mark.parametrize("wrong, expected", [(None, ""), ("tma_stores_gmem", "gmem_access")])
def test_check_by_tma_only_on_tma(gpu_interpret_mode, wrong, expected):
    ran = measure(functools.partial(chapter(wrong).add_one_tma, block_rows=64), X,
                  structure=None)
    assert kind(lesson.check_by_tma_only, ran) == expected
    assert kind(lesson.check_copies_in_bounds, ran) == ""
    assert lesson.kernel_parameters(ran)[:2] == ["x_ref", "o_ref"]


@pytest.mark.parametrize("wrong, expected", [
    (None, ""), ("pipeline_one_copy_in_flight", "pipeline_slots")])
def test_check_pipeline_reads_emit_pipeline_s_buffers(gpu_interpret_mode, wrong, expected):
    x = np.random.default_rng(5).standard_normal((4, 128, 64)).astype(np.float32)
    ran = measure(functools.partial(chapter(wrong).sum_stack, block_rows=64,
                                    max_concurrent_steps=2), x, structure=None)
    assert kind(lesson.check_pipeline, ran, slots=2, buffers=1, what="x's slabs") == expected


def test_check_copies_in_bounds_names_the_ref_past_its_end(gpu_interpret_mode):
    x = np.random.default_rng(6).standard_normal((4, 128, 64)).astype(np.float32)
    ran = measure(functools.partial(chapter("pipeline_rows_chosen_twice").sum_stack,
                                    block_rows=64, max_concurrent_steps=2), x, structure=None)
    with pytest.raises(Diagnosed) as failed:
        lesson.check_copies_in_bounds(ran)
    assert failed.value.kind == "tma_outside"
    window = dict(failed.value.facts)["window"]
    assert window.startswith(lesson.kernel_parameters(ran)[0] + ":")   # x's ref, by name


@pytest.mark.parametrize("wrong, expected", [
    (None, ""), ("warpgroups_releases_every_slot", "barrier_unwaited")])
def test_check_barriers_waited_on_warpgroups(gpu_interpret_mode, wrong, expected):
    x = np.random.default_rng(7).standard_normal((256, 64)).astype(np.float32)
    ran = measure(functools.partial(chapter(wrong).add_one_specialized, block_rows=64), x,
                  structure=None)
    assert kind(lesson.check_barriers_waited, ran) == expected


@pytest.mark.parametrize("wrong, expected", [
    (None, ""), ("warpgroups_one_does_all", "roles")])
def test_check_roles_on_warpgroups(gpu_interpret_mode, wrong, expected):
    x = np.random.default_rng(8).standard_normal((256, 64)).astype(np.float32)
    ran = measure(functools.partial(chapter(wrong).add_one_specialized, block_rows=64), x,
                  structure=None)
    assert kind(lesson.check_roles, ran) == expected
    if wrong is None:   # the reference: warpgroup 1 fetches, warpgroup 0 computes
        from pytest_pallas_hints import gpu_walk
        roles = gpu_walk.walk(lesson.kernel_of(ran)).roles
        assert roles[1].copies_in == 4 and roles[1].array_ops == 0
        assert roles[0].copies_in == 0 and roles[0].array_ops >= 4


@pytest.mark.parametrize("wrong, expected", [
    (None, ""), ("pipeline_body_decoy", "gmem_load")])
def test_check_loads_by_tma_on_pipeline(gpu_interpret_mode, wrong, expected):
    x = np.random.default_rng(9).standard_normal((4, 128, 64)).astype(np.float32)
    ran = measure(functools.partial(chapter(wrong).sum_stack, block_rows=64,
                                    max_concurrent_steps=2), x, structure=None)
    assert kind(lesson.check_loads_by_tma, ran, "x's slabs") == expected


def fetched(monkeypatch, copies):
    """The lesson's gpu_walk finds these copies of K (operand 1) per q block."""
    found = types.SimpleNamespace(fetched={(0, 0, qi): {1: n, 2: n}
                                           for qi, n in enumerate(copies)})
    monkeypatch.setattr(lesson, "gpu_walk", types.SimpleNamespace(walk=lambda call: found))
    return types.SimpleNamespace(program=types.SimpleNamespace(
        sites=[types.SimpleNamespace(call=None)]))


@pytest.mark.parametrize("copies, expected", [
    ((2, 4), ""),              # T=S=256, block_q=128, block_kv=64: 2 then 4 KV blocks
    ((4, 8), ""),              # each block copied in two halves: still in proportion
    ((4, 4), "kv_fetched"),    # every KV block fetched, the skipped ones too
])
def test_check_kv_blocks_fetched_by_hand(monkeypatch, copies, expected):
    ran = fetched(monkeypatch, copies)
    assert kind(lesson.check_kv_blocks_fetched, ran, S=256, block_q=128, block_kv=64,
                causal=True) == expected
    assert kind(lesson.check_kv_blocks_fetched, ran, S=256, block_q=128, block_kv=64,
                causal=False) == ""   # nothing to skip without a mask
