"""reference/linear.py's public API against the recurrence, token by token, in float64
NumPy: the four models, on the shapes a learner's tests keep small (T = 1, T not a
multiple of the chunk, one chunk exactly, chunks of 16, 32 and 64, H != Hv, several
batches and heads), with strong decay (log decays down to -5 per step, so a chunk's
cumulative decay leaves float32's exp range), beta only 0 or 1, and bfloat16 inputs.
The plain-JAX recurrence (puzzle 1) is checked on a few of them too.

The recurrence here is written per sequence and per token, as the model definitions
state it, independently of the exercise tests' helpers.
"""
import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pytest_pallas_hints import runtime

ROOT = Path(__file__).resolve().parent.parent


def load_reference():
    path = ROOT / "reference" / "linear.py"
    spec = importlib.util.spec_from_file_location("reference_linear", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


linear = load_reference()


@pytest.fixture(autouse=True)
def interpret_mode():
    """TPU interpret mode for every kernel here, as the plugin sets it for learners."""
    runtime.use_interpret_mode(True)


def truth(q, k, v, log_decay=None, beta=None):
    """o [B, N, T, Hv] in float64: for each sequence, S_t = g_t S_{t-1} + k_t^T w_t with
    w_t = v_t, or beta_t (v_t - g_t k_t S_{t-1}) for the delta rule; o_t = q_t S_t."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, N, T, H = q.shape
    o = np.zeros(v.shape)
    for b in range(B):
        for n in range(N):
            S = np.zeros((H, v.shape[-1]))
            for t in range(T):
                g = 1.0 if log_decay is None else np.exp(np.float64(log_decay[b, n, t]))
                S = g * S
                w = v[b, n, t]
                if beta is not None:
                    w = np.float64(beta[b, n, t]) * (w - k[b, n, t] @ S)
                S = S + np.outer(k[b, n, t], w)
                o[b, n, t] = q[b, n, t] @ S
    return o


def draw(seed, B, N, T, H, Hv, dtype, strength, beta_kind):
    gen = np.random.default_rng(seed)
    q = gen.standard_normal((B, N, T, H))
    k = gen.standard_normal((B, N, T, H))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)          # the delta rule's callers do
    v = gen.standard_normal((B, N, T, Hv))
    log_decay = -gen.uniform(0, strength, (B, N, T)).astype(np.float32)
    beta = {"uniform": gen.uniform(0, 1, (B, N, T)),
            "edges": gen.integers(0, 2, (B, N, T)),
            "ones": np.ones((B, N, T)),
            "zeros": np.zeros((B, N, T))}[beta_kind].astype(np.float32)
    cast = jnp.dtype(dtype)
    return q.astype(cast), k.astype(cast), v.astype(cast), log_decay, beta


def assert_close(yours, expected, dtype, what):
    yours, expected = np.asarray(yours), np.asarray(expected)
    assert yours.shape == expected.shape and yours.dtype == jnp.dtype(dtype), what
    y = yours.astype(np.float64)
    tolerance = 1e-4 if dtype == "float32" else 2e-2
    scale = np.abs(expected).max() or 1.0
    error = np.abs(y - expected)
    assert np.all(error <= tolerance * (np.abs(expected) + scale)), \
        f"{what}: max error {error.max():.3g}, scale {scale:.3g}"


CASES = [
    pytest.param(1, 1, 1, 16, 8, 64, "float32", 0.2, "uniform", id="T=1 chunk=64 H=16 Hv=8"),
    pytest.param(2, 1, 37, 32, 64, 16, "float32", 0.2, "uniform",
                 id="B=2 T=37 chunk=16 H=32 Hv=64 (a last partial chunk)"),
    pytest.param(1, 2, 100, 64, 32, 32, "float32", 5.0, "uniform",
                 id="N=2 T=100 chunk=32 H=64 Hv=32 log_decay>=-5"),
    pytest.param(1, 1, 128, 64, 64, 64, "float32", 5.0, "edges",
                 id="T=128 chunk=64 log_decay>=-5 beta 0 or 1"),
    pytest.param(3, 1, 64, 32, 16, 64, "float32", 0.5, "ones",
                 id="B=3 T=64 chunk=64 (one chunk) beta=1"),
    pytest.param(1, 1, 40, 16, 16, 16, "float32", 0.2, "zeros", id="T=40 chunk=16 beta=0"),
    pytest.param(2, 2, 200, 64, 128, 64, "bfloat16", 0.2, "uniform",
                 id="B=2 N=2 T=200 chunk=64 H=64 Hv=128 bf16"),
    pytest.param(1, 1, 90, 32, 64, 16, "bfloat16", 5.0, "edges",
                 id="T=90 chunk=16 bf16 log_decay>=-5 beta 0 or 1"),
]


@pytest.mark.parametrize("B, N, T, H, Hv, chunk, dtype, strength, beta_kind", CASES)
def test_public_api_matches_the_recurrence(B, N, T, H, Hv, chunk, dtype, strength, beta_kind):
    q, k, v, log_decay, beta = draw(T + H + Hv + chunk, B, N, T, H, Hv, dtype, strength,
                                    beta_kind)

    @jax.jit
    def all_four(q, k, v, beta, log_decay):
        return (linear.linear_attention(q, k, v, chunk=chunk),
                linear.gated_linear_attention(q, k, v, log_decay, chunk=chunk),
                linear.delta_rule(q, k, v, beta, chunk=chunk),
                linear.gated_delta_rule(q, k, v, beta, log_decay, chunk=chunk))

    outputs = all_four(q, k, v, beta, log_decay)
    gates = [{}, {"log_decay": log_decay}, {"beta": beta},
             {"log_decay": log_decay, "beta": beta}]
    names = ["linear_attention", "gated_linear_attention", "delta_rule", "gated_delta_rule"]
    for name, yours, gate in zip(names, outputs, gates):
        assert_close(yours, truth(q, k, v, **gate), dtype, name)


@pytest.mark.parametrize("B, N, T, H, Hv, chunk, dtype, strength, beta_kind",
                         [CASES[1], CASES[3], CASES[7]])
def test_the_recurrent_form_matches_the_recurrence(B, N, T, H, Hv, chunk, dtype, strength,
                                                   beta_kind):
    q, k, v, log_decay, beta = draw(T + H, B, N, T, H, Hv, dtype, strength, beta_kind)
    for gate in ({}, {"log_decay": log_decay}, {"beta": beta},
                 {"log_decay": log_decay, "beta": beta}):
        yours = jax.jit(linear.recurrent)(q, k, v, gate.get("log_decay"), gate.get("beta"))
        assert_close(yours, truth(q, k, v, **gate), dtype, f"recurrent with {sorted(gate)}")


def test_beta_zero_writes_nothing_and_a_strong_decay_forgets_everything():
    """Two limits: beta = 0 writes nothing (the output is exactly zero), and a log decay of
    -80 per step (exp(-80) < 1e-34) leaves each token only its own write,
    o_t = (q_t . k_t) v_t."""
    q, k, v, _, beta = draw(7, 1, 2, 48, 16, 32, "float32", 0.1, "zeros")
    log_decay = np.full(beta.shape, -80.0, np.float32)
    own = np.einsum("bnth,bnth->bnt", q, k)[..., None] * np.asarray(v, np.float64)
    assert np.all(np.asarray(linear.delta_rule(q, k, v, beta, chunk=16)) == 0)
    assert_close(linear.gated_linear_attention(q, k, v, log_decay, chunk=16), own, "float32",
                 "gated_linear_attention, log_decay=-80")


def exercise_tests():
    """exercises/test_linear.py as a module: its bf16 configurations' inputs."""
    path = ROOT / "exercises" / "test_linear.py"
    spec = importlib.util.spec_from_file_location("linear_exercise_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rounded(change: str):
    """reference/linear.py with the state rounded to bf16: kept in bf16 (read rounded at
    every chunk, as a bf16 scratch would hold it), or only for the delta rule's
    prediction k S."""
    source = (ROOT / "reference" / "linear.py").read_text()
    if change == "state":
        old, new = "state = state_ref[...]", \
            "state = state_ref[...].astype(jnp.bfloat16).astype(jnp.float32)"
    else:
        old, new = "jnp.dot(k.astype(jnp.float32), state,", \
            "jnp.dot(k, state.astype(jnp.bfloat16),"
    assert old in source
    module = type(linear)("rounded_linear")
    exec(compile(source.replace(old, new), "rounded_linear.py", "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("gated", [False, True], ids=["delta_rule", "gated_delta"])
@pytest.mark.parametrize("change", ["state", "prediction"])
def test_the_bf16_delta_configurations_fail_a_bf16_state_on_values(gated, change):
    """The bf16 configurations of puzzles 5 and 6 (8 chunks, a large value in the state
    that every prediction reads and no query sees) tell a state kept in bf16, or read in
    bf16 for k S, from the right answer by the values alone, at the puzzle's bf16
    tolerance: not only by the precision rule, which reads the program."""
    from pytest_pallas_hints.checking import Rng
    from pytest_pallas_hints.diagnose import close

    tests = exercise_tests()
    wrong = rounded(change)
    B, N, T, H, Hv, chunk = 1, 1, 128, 16, 32, 16
    for seed in range(3):
        rng = Rng(seed)
        log_decay, beta = tests.gates(rng, B, N, T, strength=0.02, edges=not gated)
        log_decay = log_decay if gated else None
        q, k, v = tests.hidden_value(rng, B, N, T, H, Hv, log_decay, beta, chunk=chunk)
        expected = tests.recurrence(q, k, v, log_decay, beta).astype("bfloat16")
        per_token = (beta, log_decay) if gated else (beta,)
        kernel = "gated_delta_kernel" if gated else "delta_kernel"
        right, yours = (module.chunked_call(q, k, v, *per_token, chunk=chunk,
                                            kernel=getattr(module, kernel))
                        for module in (linear, wrong))
        assert close(np.asarray(right), expected, 2e-2).all(), f"seed {seed}: reference"
        assert not close(np.asarray(yours), expected, 2e-2).all(), \
            f"seed {seed}: a bf16 {change} passes on values"
