"""reference/norms.py's public API against float64 NumPy, forward and every gradient, in
TPU interpret mode: softmax (whole rows and column blocks), rms_norm, layer_norm and
cross_entropy, on many shapes (a single row, one element, sizes no block divides, a
vocabulary not a multiple of block_v), float32 and bfloat16, logits large enough to
overflow a naive exp. Then what the API promises besides values: arguments checked up
front, labels outside [0, V) refused when concrete, every gradient from Pallas kernels,
and no [T, V] array anywhere in cross_entropy's program, forward or backward.
"""
import functools
import importlib.util
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pytest_pallas_hints import runtime

ROOT = Path(__file__).resolve().parent.parent


def load_reference():
    path = ROOT / "reference" / "norms.py"
    spec = importlib.util.spec_from_file_location("reference_norms", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


norms = load_reference()


@pytest.fixture(autouse=True)
def interpret_mode():
    """TPU interpret mode for every kernel here, as the plugin sets it for learners."""
    runtime.use_interpret_mode(True)


def f64(*arrays):
    return [np.asarray(a, np.float64) for a in arrays]


def draw(gen, shape, dtype, scale=1.0, offset=0.0):
    return jnp.asarray(gen.standard_normal(shape) * scale + offset, dtype)


def assert_close(name, yours, expected, dtype, scale=0.0):
    """max |yours - expected| / max |expected| within what the dtype allows (bf16 inputs
    are rounded once more on the way out); scale: a floor for max |expected|, where the
    expected values underflow float32 (the gradient of a one-hot softmax)."""
    tolerance = {"float32": 1e-5, "bfloat16": 3e-2}[dtype]
    yours, expected = f64(yours, expected)
    assert yours.shape == expected.shape, f"{name}: shape {yours.shape} != {expected.shape}"
    assert np.isfinite(yours).all(), f"{name}: not finite"
    error = np.abs(yours - expected).max() / max(np.abs(expected).max(), scale, 1e-30)
    assert error <= tolerance, f"{name}: max |error| / max |expected| = {error:.2e}"


def forward_and_grads(fn, *args):
    """fn(*args) and its gradients for a random cotangent, in one jitted program."""
    gen = np.random.default_rng(7)

    @jax.jit
    def run(*args):
        out, vjp = jax.vjp(fn, *args)
        cotangent = jnp.asarray(gen.standard_normal(out.shape), out.dtype)
        return out, cotangent, vjp(cotangent)

    out, cotangent, grads = run(*args)
    return out, cotangent, grads


# --- the truths, float64 --------------------------------------------------------------

def softmax64(x, dy):
    x, dy = f64(x, dy)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    y = e / e.sum(axis=1, keepdims=True)
    return y, y * (dy - (dy * y).sum(axis=1, keepdims=True))


def rms64(x, scale, dy, eps):
    x, scale, dy = f64(x, scale, dy)
    r = 1 / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)
    x_hat, g = x * r, dy * scale
    return x_hat * scale, r * (g - x_hat * (g * x_hat).mean(axis=1, keepdims=True)), \
        (dy * x_hat).sum(axis=0)


def layer_norm64(x, scale, bias, dy, eps):
    x, scale, bias, dy = f64(x, scale, bias, dy)
    mean = x.mean(axis=1, keepdims=True)
    r = 1 / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + eps)
    x_hat, g = (x - mean) * r, dy * scale
    dx = r * (g - g.mean(axis=1, keepdims=True) - x_hat * (g * x_hat).mean(axis=1,
                                                                           keepdims=True))
    return x_hat * scale + bias, dx, (dy * x_hat).sum(axis=0), dy.sum(axis=0)


def cross_entropy64(h, w, labels, dloss):
    h, w, dloss = f64(h, w, dloss)
    logits = h @ w
    m = logits.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(logits - m).sum(axis=1))
    rows = np.arange(len(labels))
    p = np.exp(logits - lse[:, None])
    p[rows, labels] -= 1
    dlogits = p * dloss[:, None]
    return lse - logits[rows, labels], dlogits @ w.T, h.T @ dlogits


# --- values ---------------------------------------------------------------------------

@pytest.mark.parametrize("R, C, block_rows, block_cols, dtype, scale", [
    pytest.param(1, 1, 16, None, "float32", 1.0, id="one element"),
    pytest.param(1, 300, 16, None, "float32", 1.0, id="one row C=300"),
    pytest.param(1, 300, 16, 128, "float32", 1.0, id="one row C=300 block_cols=128"),
    pytest.param(37, 1000, 8, None, "float32", 3.0, id="R=37 C=1000 whole rows"),
    pytest.param(37, 1000, 8, 256, "float32", 3.0, id="R=37 C=1000 block_cols=256"),
    pytest.param(9, 130, 8, 128, "float32", 1.0, id="C=130: a 2-column tail"),
    pytest.param(24, 512, 8, 128, "float32", 1e3, id="logits ~1e3"),
    pytest.param(20, 4096, 16, 512, "bfloat16", 2.0, id="bf16 R=20 C=4096 block_cols=512"),
    pytest.param(50, 384, 16, None, "bfloat16", 2.0, id="bf16 R=50 C=384 whole rows"),
    pytest.param(8, 200, 16, 512, "float32", 1.0, id="blocks larger than the array"),
])
def test_softmax_and_its_gradient(R, C, block_rows, block_cols, dtype, scale):
    gen = np.random.default_rng(R * C)
    x = draw(gen, (R, C), dtype, scale)
    y, dy, (dx,) = forward_and_grads(
        functools.partial(norms.softmax, block_rows=block_rows, block_cols=block_cols), x)
    assert y.dtype == dx.dtype == jnp.dtype(dtype)
    expected_y, expected_dx = softmax64(x, dy)
    assert_close("y", y, expected_y, dtype)
    # |dx| <= 2 max|y| max|dy|: the scale of its errors, also where dx itself underflows.
    assert_close("dx", dx, expected_dx, dtype, scale=float(np.abs(f64(dy)[0]).max()) * 1e-3)


@pytest.mark.parametrize("R, D, block_rows, dtype, scale_dtype", [
    pytest.param(1, 128, 16, "float32", "float32", id="one row"),
    pytest.param(3, 8, 16, "float32", "float32", id="R=3 D=8"),
    pytest.param(37, 200, 8, "float32", "float32", id="R=37 D=200 block_rows=8"),
    pytest.param(64, 512, 16, "bfloat16", "bfloat16", id="bf16 R=64 D=512"),
    pytest.param(45, 256, 16, "bfloat16", "float32", id="bf16 x, f32 scale, R=45"),
])
def test_rms_norm_and_its_gradients(R, D, block_rows, dtype, scale_dtype):
    gen = np.random.default_rng(R * D)
    x, scale = draw(gen, (R, D), dtype), draw(gen, (D,), scale_dtype)
    y, dy, (dx, dscale) = forward_and_grads(
        functools.partial(norms.rms_norm, eps=1e-6, block_rows=block_rows), x, scale)
    assert (y.dtype, dx.dtype, dscale.dtype) == (x.dtype, x.dtype, scale.dtype)
    for name, yours, expected in zip(("y", "dx", "dscale"), (y, dx, dscale),
                                     rms64(x, scale, dy, 1e-6)):
        assert_close(name, yours, expected, dtype)


@pytest.mark.parametrize("R, D, block_rows, dtype, offset", [
    pytest.param(1, 128, 16, "float32", 0.0, id="one row"),
    pytest.param(37, 200, 8, "float32", 100.0, id="R=37 D=200 rows far from zero"),
    pytest.param(64, 512, 16, "bfloat16", 0.0, id="bf16 R=64 D=512"),
    pytest.param(17, 384, 16, "bfloat16", 5.0, id="bf16 R=17 D=384 offset 5"),
])
def test_layer_norm_and_its_gradients(R, D, block_rows, dtype, offset):
    gen = np.random.default_rng(R * D + 1)
    x = draw(gen, (R, D), dtype, offset=offset)
    scale, bias = draw(gen, (D,), dtype), draw(gen, (D,), dtype)
    y, dy, (dx, dscale, dbias) = forward_and_grads(
        functools.partial(norms.layer_norm, eps=1e-5, block_rows=block_rows), x, scale, bias)
    for name, yours, expected in zip(("y", "dx", "dscale", "dbias"), (y, dx, dscale, dbias),
                                     layer_norm64(x, scale, bias, dy, 1e-5)):
        assert_close(name, yours, expected, dtype)


@pytest.mark.parametrize("T, D, V, block_t, block_v, dtype, scale", [
    pytest.param(1, 16, 1, 128, 512, "float32", 1.0, id="T=1 V=1"),
    pytest.param(1, 32, 300, 128, 512, "float32", 1.0, id="one token V=300"),
    pytest.param(37, 64, 1000, 16, 128, "float32", 1.0, id="T=37 V=1000 block_t=16 block_v=128"),
    pytest.param(64, 64, 1000, 32, 256, "float32", 200.0, id="logits ~1e4"),
    pytest.param(100, 64, 2048, 32, 512, "bfloat16", 1.0, id="bf16 T=100 V=2048"),
    pytest.param(130, 128, 640, 128, 128, "bfloat16", 1.0, id="bf16 T=130 D=128 V=640"),
])
def test_cross_entropy_and_its_gradients(T, D, V, block_t, block_v, dtype, scale):
    gen = np.random.default_rng(T * V + D)
    h = draw(gen, (T, D), dtype, scale)
    w = draw(gen, (D, V), dtype, 1 / math.sqrt(D) if scale == 1.0 else 10.0)
    labels = gen.integers(0, V, T).astype(np.int32)
    labels[0], labels[-1] = 0, V - 1                       # both ends of the vocabulary
    loss, dloss, (dh, dw) = forward_and_grads(
        lambda h, w: norms.cross_entropy(h, w, jnp.asarray(labels), block_t=block_t,
                                         block_v=block_v), h, w)
    assert loss.dtype == jnp.float32 and (dh.dtype, dw.dtype) == (h.dtype, w.dtype)
    assert np.isfinite(np.asarray(loss)).all()
    expected = cross_entropy64(h, w, labels, dloss)
    assert_close("loss", loss, expected[0], "float32" if dtype == "float32" else "bfloat16")
    assert_close("dh", dh, expected[1], dtype)
    assert_close("dw", dw, expected[2], dtype)


def test_cross_entropy_is_finite_for_logits_of_1e4():
    gen = np.random.default_rng(3)
    h, w = draw(gen, (40, 64), "float32", 30.0), draw(gen, (64, 700), "float32", 40.0)
    labels = jnp.asarray(gen.integers(0, 700, 40), jnp.int32)
    assert np.abs(np.asarray(h) @ np.asarray(w)).max() > 1e4
    loss = jax.jit(lambda h, w: norms.cross_entropy(h, w, labels, block_t=16, block_v=128))(h, w)
    assert np.isfinite(np.asarray(loss)).all()
    assert_close("loss", loss, cross_entropy64(h, w, np.asarray(labels), np.ones(40))[0],
                 "float32")


# --- what the API promises besides values --------------------------------------------

def kernels_in(fn, *args):
    return str(jax.make_jaxpr(fn)(*args)).count("pallas_call")


@pytest.mark.parametrize("name, fn, args, count", [
    ("softmax", lambda x: norms.softmax(x).sum(), [(20, 300)], 2),
    ("softmax, block_cols", lambda x: norms.softmax(x, block_cols=128).sum(), [(20, 300)], 2),
    ("rms_norm", lambda x, s: norms.rms_norm(x, s).sum(), [(20, 128), (128,)], 2),
    ("layer_norm", lambda x, s, b: norms.layer_norm(x, s, b).sum(),
     [(20, 128), (128,), (128,)], 2),
])
def test_every_gradient_comes_from_kernels(name, fn, args, count):
    arrays = [jnp.zeros(shape, jnp.float32) for shape in args]
    grad = jax.grad(fn, argnums=tuple(range(len(arrays))))
    assert kernels_in(grad, *arrays) == count, name


def arrays_of(jaxpr):
    """Shapes of every array a jaxpr and the jaxprs inside it (not the kernels') make."""
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            yield getattr(var.aval, "shape", ())
        if eqn.primitive.name == "pallas_call":
            continue
        for value in eqn.params.values():
            for inner in (value if isinstance(value, (tuple, list)) else (value,)):
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    yield from arrays_of(inner)


def test_cross_entropy_never_makes_a_vocabulary_sized_array():
    T, D, V = 256, 64, 1000
    h, w = jnp.zeros((T, D), jnp.bfloat16), jnp.zeros((D, V), jnp.bfloat16)
    labels = jnp.zeros((T,), jnp.int32)

    def loss_and_grads(h, w, labels):
        return jax.value_and_grad(lambda h, w: norms.cross_entropy(
            h, w, labels, block_t=64, block_v=256).sum(), argnums=(0, 1))(h, w)

    closed = jax.make_jaxpr(loss_and_grads)(h, w, labels)
    assert str(closed).count("pallas_call") == 3     # the forward, dh and dw
    sizes = [math.prod(shape) for shape in arrays_of(closed.jaxpr)]
    assert max(sizes) < T * V, f"an array of {max(sizes)} elements (T * V = {T * V})"


@pytest.mark.parametrize("call, message", [
    (lambda: norms.softmax(jnp.zeros((4, 8, 8))), "x must be a 2-D floating array"),
    (lambda: norms.softmax(jnp.zeros((4, 8), jnp.int32)), "x must be a 2-D floating array"),
    (lambda: norms.softmax(jnp.zeros((4, 8)), block_rows=12), "block_rows=12"),
    (lambda: norms.softmax(jnp.zeros((4, 8)), block_cols=100), "block_cols=100"),
    (lambda: norms.rms_norm(jnp.zeros((4, 8)), jnp.zeros(7)), "scale [D]"),
    (lambda: norms.rms_norm(jnp.zeros((4, 8)), jnp.zeros(8), block_rows=0), "block_rows=0"),
    (lambda: norms.layer_norm(jnp.zeros((4, 8)), jnp.zeros(8), jnp.zeros(9)), "bias [D]"),
    (lambda: norms.cross_entropy(jnp.zeros((4, 8)), jnp.zeros((9, 16)),
                                 np.zeros(4, np.int32)), "h must be [T, D] and w [D, V]"),
    (lambda: norms.cross_entropy(jnp.zeros((4, 8)), jnp.zeros((8, 16)),
                                 np.zeros(4, np.float32)), "labels must be integers"),
    (lambda: norms.cross_entropy(jnp.zeros((4, 8)), jnp.zeros((8, 16)),
                                 np.zeros(3, np.int32)), "labels must be integers of shape"),
    (lambda: norms.cross_entropy(jnp.zeros((4, 8)), jnp.zeros((8, 16)),
                                 np.array([0, 3, 16, 1], np.int32)), "labels must lie in [0, V=16)"),
    (lambda: norms.cross_entropy(jnp.zeros((4, 8)), jnp.zeros((8, 16)),
                                 jnp.array([0, -1, 2, 1], jnp.int32)), "labels must lie in"),
    (lambda: norms.cross_entropy(jnp.zeros((4, 8)), jnp.zeros((8, 16)),
                                 np.zeros(4, np.int32), block_v=64), "block_v=64"),
])
def test_arguments_are_checked_up_front(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)


def test_traced_labels_are_not_checked_but_work():
    """Under jit the labels have no values: no check, and the loss is right."""
    h = jnp.asarray(np.random.default_rng(0).standard_normal((16, 32)), jnp.float32)
    w = jnp.asarray(np.random.default_rng(1).standard_normal((32, 200)), jnp.float32)
    labels = np.arange(16, dtype=np.int32) * 12
    loss = jax.jit(functools.partial(norms.cross_entropy, block_t=8, block_v=128))(
        h, w, jnp.asarray(labels))
    assert_close("loss", loss, cross_entropy64(h, w, labels, np.ones(16))[0], "float32")
