"""pytest_pallas_hints/lessons/norms.py on its own: its budgets against what the
reference kernels measurably do (reference/norms.py, in TPU interpret mode), its float64
models against hand-worked cases and finite differences, its wrong-answer models
against the right ones, and its checks on a pass and a fail each."""
import importlib.util
from pathlib import Path

import jax
import numpy as np
import pytest

from pytest_pallas_hints import check_blocks, runtime
from pytest_pallas_hints.checking import Diagnosed, measure
from pytest_pallas_hints.lessons import norms as lesson

ROOT = Path(__file__).resolve().parents[2]


def load_reference():
    path = ROOT / "reference" / "norms.py"
    spec = importlib.util.spec_from_file_location("reference_norms_lessons", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


norms = load_reference()


@pytest.fixture(autouse=True, scope="module")
def interpret_mode():
    runtime.use_interpret_mode(True)


def normal(shape, dtype="float32", seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def kind_of(call) -> str:
    with pytest.raises(Diagnosed) as failed:
        call()
    return failed.value.kind


# --- budgets against the reference kernels' measured runs --------------------------

def test_lane_statistics_and_long_rows_vmem_by_hand():
    assert lesson.lane_statistics(8) == 2 * 8 * 128 * 4 == 8192
    # two buffers of x's (8, 128) float32 block, two of the output's, and the statistics
    assert lesson.long_rows_vmem(8, 128, 4) == 4 * 8 * 128 * 4 + 8192 == 24576


def test_long_rows_vmem_holds_the_reference_kernel():
    x = normal((16, 512))
    ran = measure(norms.softmax_long, x, block_rows=8, block_cols=128, structure=None)
    budget = lesson.long_rows_vmem(8, 128, x.itemsize)
    assert max(found.total for found in ran.vmem) <= budget
    assert ran.traffic.total == 3 * x.nbytes    # the test's reference: two reads, one write


@pytest.mark.parametrize("block_cols, passes", [(None, 1), (128, 2)])
def test_softmax_grad_bytes_are_the_reference_kernels(block_cols, passes):
    x, dy = normal((16, 256), seed=1), normal((16, 256), seed=2)
    ran = measure(lesson.with_grads(norms.softmax, "x dy"), x, dy, block_rows=8,
                  block_cols=block_cols, structure=None)
    reference, minimum = lesson.softmax_grad_bytes(x, passes=passes)
    assert ran.traffic.total == reference
    assert minimum == 5 * x.nbytes <= reference


def test_rms_forward_bytes_are_the_reference_kernels():
    x, scale = normal((24, 256)), normal((256,), seed=1)
    ran = measure(norms.rms_norm_forward, x, scale, eps=1e-6, block_rows=8, structure=None)
    assert ran.traffic.total == lesson.rms_forward_bytes(x, scale) == 2 * x.nbytes + 1024 + 96


def test_rms_norm_bytes_are_the_reference_kernels():
    x, scale, dy = normal((24, 256)), normal((256,), seed=1), normal((24, 256), seed=2)
    ran = measure(lesson.with_grads(norms.rms_norm, "x scale dy"), x, scale, dy, eps=1e-6,
                  block_rows=8, structure=None)
    assert ran.traffic.total == lesson.rms_norm_bytes(x, scale)


def test_layer_norm_bytes_are_the_reference_kernels():
    x, dy = normal((24, 256)), normal((24, 256), seed=2)
    scale, bias = normal((256,), seed=1), normal((256,), seed=3)
    ran = measure(lesson.with_grads(norms.layer_norm, "x scale bias dy"), x, scale, bias, dy,
                  eps=1e-5, block_rows=8, structure=None)
    assert ran.traffic.total == lesson.layer_norm_bytes(x, scale)


def test_fused_xent_budgets_hold_the_reference_kernel():
    T, D, V, block_t, block_v = 16, 64, 384, 8, 128
    h, w = normal((T, D)), normal((D, V), seed=1, scale=0.1)
    labels = np.random.default_rng(2).integers(0, V, T)
    ran = measure(norms.cross_entropy_forward, h, w, labels, block_t=block_t, block_v=block_v,
                  structure=None)
    reference, minimum = lesson.fused_xent_bytes(h, w, block_t=block_t)
    assert ran.traffic.total == reference
    assert minimum == h.nbytes + w.nbytes + 3 * T * 4
    # one (block_t, D) x (D, block_v) dot per (token block, vocabulary block) pair
    assert ran.work == lesson.xent_flops(T, D, V, block_t, block_v, 1) == 6 * 2 * 8 * 64 * 128
    assert max(found.total for found in ran.vmem) <= lesson.fused_xent_vmem(block_t, block_v, D, 4)


def test_xent_backward_budgets_are_the_reference_kernels():
    T, D, V, block_t, block_v = 16, 64, 384, 8, 128
    h, w = normal((T, D)), normal((D, V), seed=1, scale=0.1)
    dloss = normal((T,), seed=3)
    labels = np.random.default_rng(2).integers(0, V, T)
    ran = measure(lesson.with_grads(norms.cross_entropy, "h w dloss"), h, w, dloss,
                  labels=labels, block_t=block_t, block_v=block_v, structure=None)
    reference, minimum = lesson.xent_backward_bytes(h, w, block_t=block_t, block_v=block_v)
    assert ran.traffic.total == reference
    assert minimum < reference
    assert ran.work == lesson.xent_flops(T, D, V, block_t, block_v, 5)
    # and the function measured names its arguments: check_blocks finds h and w by name
    check_blocks(ran, h=(block_t, D), w=(D, block_v))
    with pytest.raises(Diagnosed):
        check_blocks(ran, w=(D, 2 * block_v))


# --- models, by hand and against finite differences --------------------------------

def test_online64_by_hand():
    x = np.array([[0.0, 1.0]])
    e = np.e
    assert np.allclose(lesson.online64(x, 1), [[1 / (1 + e), e / (1 + e)]])   # right
    # l not rescaled when the max moves from 0 to 1: l = 1 + 1
    assert np.allclose(lesson.online64(x, 1, rescale=False), [[1 / e / 2, 1 / 2]])
    # only the last block's statistics: m = 1, l = 1
    assert np.allclose(lesson.online64(x, 1, reset=True), [[1 / e, 1.0]])


def test_online64_is_the_softmax_for_every_block_size():
    x = normal((3, 10), "float64", scale=5.0)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    for block_cols in (1, 3, 10, 16):
        assert np.allclose(lesson.online64(x, block_cols), e / e.sum(axis=1, keepdims=True))


def test_row_blocks_by_hand():
    assert lesson.row_blocks(np.array([[1.0], [2.0], [3.0]]), 2).tolist() == [[3.0], [3.0]]


def directional(f, x, direction, eps=1e-6):
    return (f(x + eps * direction) - f(x - eps * direction)) / (2 * eps)


def test_layer_norm64_gradients_against_finite_differences():
    R, D, eps = 3, 5, 1e-5
    x, dy = normal((R, D), "float64"), normal((R, D), "float64", seed=1)
    scale, bias = normal((D,), "float64", seed=2), normal((D,), "float64", seed=3)
    truth = lesson.layer_norm64(x, scale, bias, dy, eps)
    mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    assert np.allclose(truth["y"], (x - mean) / np.sqrt(var + eps) * scale + bias)
    d = normal((R, D), "float64", seed=4)
    loss = lambda x_: (dy * lesson.layer_norm64(x_, scale, bias, dy, eps)["y"]).sum()   # noqa: E731
    assert np.isclose(directional(loss, x, d), (truth["dx"] * d).sum(), rtol=1e-5)
    dscale = np.array([directional(lambda s: (dy * lesson.layer_norm64(
        x, s, bias, dy, eps)["y"]).sum(), scale, np.eye(D)[j]) for j in range(D)])
    assert np.allclose(dscale, truth["dscale"], rtol=1e-5)
    assert np.allclose(truth["dbias"], dy.sum(axis=0))
    unbiased = lesson.layer_norm64(x, scale, bias, dy, eps, ddof=1)["y"]
    var1 = x.var(axis=1, ddof=1, keepdims=True)
    assert np.allclose(unbiased, (x - mean) / np.sqrt(var1 + eps) * scale + bias)


def test_xent64_against_finite_differences_and_one_block():
    T, D, V = 4, 3, 7
    h, w = normal((T, D), "float64"), normal((D, V), "float64", seed=1)
    labels, dloss = np.array([0, 6, 3, 3]), normal((T,), "float64", seed=2)
    truth = lesson.xent64(h, w, labels, dloss)
    logits = h @ w
    lse = np.log(np.exp(logits).sum(axis=1))
    assert np.allclose(truth["lse"], lse)
    assert np.allclose(truth["loss"], lse - logits[np.arange(T), labels])
    loss = lambda h_, w_: (dloss * lesson.xent64(h_, w_, labels)["loss"]).sum()   # noqa: E731
    dh, dw = normal((T, D), "float64", seed=3), normal((D, V), "float64", seed=4)
    assert np.isclose(directional(lambda h_: loss(h_, w), h, dh), (truth["dh"] * dh).sum())
    assert np.isclose(directional(lambda w_: loss(h, w_), w, dw), (truth["dw"] * dw).sum())
    # columns [2, 5) only: the label counts where it lies there (tokens 2 and 3)
    block = lesson.xent64(h, w, labels, blocks=(2, 5))
    part = np.log(np.exp(logits[:, 2:5]).sum(axis=1))
    assert np.allclose(block["lse"], part)
    assert np.allclose(block["loss"], part - np.array([0, 0, 1, 1]) * logits[:, 3])


# --- wrong answers: what each model is, and that it is not the right answer --------

def rms64(x, scale, dy, eps):   # the test file's right answer, restated
    ms = (x * x).mean(axis=1, keepdims=True)
    inv_rms = 1 / np.sqrt(ms + eps)
    x_hat, g = x * inv_rms, dy * scale
    return dict(dx=inv_rms * (g - x_hat * (g * x_hat).mean(axis=1, keepdims=True)),
                inv_rms=inv_rms, g=g, x_hat=x_hat)


def test_rms_dx_likely():
    x, dy, scale = normal((4, 6), "float64"), normal((4, 6), "float64", seed=1), \
        normal((6,), "float64", seed=2)
    truth = rms64(x, scale, dy, 1e-6)
    likely = lesson.rms_dx_likely(truth, "float64")
    term = truth["inv_rms"] * truth["x_hat"] * (truth["g"] * truth["x_hat"]).mean(axis=1,
                                                                                   keepdims=True)
    assert np.allclose(likely["no_mean_term"](), truth["dx"] + term)
    assert np.allclose(likely["sum_not_mean"](), truth["dx"] - (6 - 1) * term)


def test_layer_norm_likely():
    x, dy = normal((4, 6), "float64") + 3, normal((4, 6), "float64", seed=1)
    scale, bias = normal((6,), "float64", seed=2), normal((6,), "float64", seed=3)
    truth = lesson.layer_norm64(x, scale, bias, dy, 1e-5)
    y = lesson.layer_norm_y_likely(x, scale, bias, dy, "float64")
    assert np.allclose(y["not_centred"](), x / np.sqrt((x * x).mean(axis=1, keepdims=True)
                                                       + 1e-5) * scale + bias)
    assert not np.allclose(y["unbiased_variance"](), truth["y"])
    dx = lesson.layer_norm_dx_likely(truth, "float64")
    g, x_hat, rstd = truth["g"], truth["x_hat"], truth["rstd"]
    assert np.allclose(dx["no_mean_of_g"]() - truth["dx"], rstd * g.mean(axis=1, keepdims=True))
    assert np.allclose(dx["no_mean_term"]() - truth["dx"],
                       rstd * x_hat * (g * x_hat).mean(axis=1, keepdims=True))


def test_vocabulary_block_and_grads_likely():
    T, D, V, block_v = 4, 3, 300, 128
    h, w = normal((T, D)), normal((D, V), seed=1)
    labels, dloss = np.array([0, 299, 130, 5]), normal((T,), seed=2)
    one = lesson.vocabulary_block_likely(h, w, labels, block_v=block_v)
    logits = np.asarray(h, np.float64) @ np.asarray(w, np.float64)
    last = np.log(np.exp(logits[:, 256:]).sum(axis=1))          # the last block: [256, 300)
    assert np.allclose(one["lse"]["last_vocabulary_block"](), last[:, None], rtol=1e-6)
    assert np.allclose(one["loss"]["last_vocabulary_block"](),
                       last - np.array([0, 1, 0, 0]) * logits[:, 299], rtol=1e-6)
    first = np.log(np.exp(logits[:, :128]).sum(axis=1))
    assert np.allclose(one["loss"]["first_vocabulary_block"](),
                       first - np.array([1, 0, 0, 1]) * logits[np.arange(T), labels], rtol=1e-6)
    truth = lesson.xent64(h, w, labels, dloss)
    wrong = lesson.xent_grads_likely(h, w, truth, "float64")
    dlogits = np.exp(logits - truth["lse"][:, None])   # the probabilities, unscaled
    assert np.allclose(wrong["dw"]["no_label_term"](),
                       np.asarray(h, np.float64).T @ (dlogits * np.asarray(dloss)[:, None]))
    dlogits[np.arange(T), labels] -= 1
    assert np.allclose(wrong["dh"]["dloss_ignored"](), dlogits @ np.asarray(w, np.float64).T)


# --- checks: one pass and one fail each ----------------------------------------------

def test_checks_pass_and_fail_with_their_kinds():
    x = np.ones((4, 8), np.float32)
    lesson.check_returns_two((1, 2), "f", "(a, b)")
    assert kind_of(lambda: lesson.check_returns_two(x, "f", "(a, b)")) == "returned"
    lesson.check_not_all_inf(np.array([np.inf, 1.0]), x)
    assert kind_of(lambda: lesson.check_not_all_inf(np.full(3, np.inf), x)) == "all_inf"
    lesson.check_saves_one_per_row(np.ones((4, 1)), x)
    assert kind_of(lambda: lesson.check_saves_one_per_row(x, x)) == "saves_normalised"
    lesson.check_loss_finite(np.ones(4), 4)
    assert kind_of(lambda: lesson.check_loss_finite(np.array([1.0, np.inf]), 2)) == "overflow"
    expected = np.linspace(1, 2, 64)
    once = expected.astype(jax.numpy.bfloat16)
    lesson.check_rounded_once(once, expected)
    off = (np.asarray(once, np.float64) * (1 + 2.0 ** -7)).astype(jax.numpy.bfloat16)
    assert kind_of(lambda: lesson.check_rounded_once(off, expected)) == "rounded_twice"


def test_saved_counts_the_large_residuals():
    saved = lesson.Saved()
    saved.arrays = [((16, 256), np.float32), ((16, 1), np.float32)]
    saved.check(rows=16 * 256, most=1, why="")
    saved.arrays.append(((16, 256), np.float32))
    assert kind_of(lambda: saved.check(rows=16 * 256, most=1, why="")) == "residuals"


def test_with_grads_records_what_the_forward_saves():
    x, dy = normal((8, 128)), normal((8, 128), seed=1)
    saved = lesson.Saved()
    out = jax.jit(lesson.with_grads(norms.softmax, "x dy", saved=saved))(x, dy)
    assert len(out) == 2 and out[1].shape == x.shape
    assert [shape for shape, _ in saved.arrays] == [(8, 128)]   # y, the forward's output
