"""pytest_pallas_hints/lessons/linear.py on its own: the recurrence and its chunkwise
form against hand-worked cases and against each other, the near-miss models against the
right answer, the flop and VMEM budgets against what the reference kernels
(reference/linear.py, in TPU interpret mode) measurably do, and the checks that read a
kernel's program on small kernels written to pass or fail each."""
import functools
import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_pallas_hints import runtime
from pytest_pallas_hints.checking import Diagnosed, measure
from pytest_pallas_hints.lessons import linear as lesson

ROOT = Path(__file__).resolve().parents[2]


def load_reference():
    path = ROOT / "reference" / "linear.py"
    spec = importlib.util.spec_from_file_location("reference_linear_lessons", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


linear = load_reference()


@pytest.fixture(autouse=True, scope="module")
def interpret_mode():
    runtime.use_interpret_mode(True)


def draw(B, N, T, H, Hv, seed=0, dtype="float32"):
    gen = np.random.default_rng(seed)
    q, k, v = (gen.standard_normal(s) for s in ((B, N, T, H), (B, N, T, H), (B, N, T, Hv)))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    log_decay = -gen.uniform(0, 0.5, (B, N, T)).astype(np.float32)
    beta = gen.uniform(0, 1, (B, N, T)).astype(np.float32)
    return (*(x.astype(dtype) for x in (q, k, v)), log_decay, beta)


def kind_of(call) -> str:
    with pytest.raises(Diagnosed) as failed:
        call()
    return failed.value.kind


# --- the recurrence and its chunkwise form ------------------------------------------

def test_recurrence_by_hand():
    """H = Hv = 1, q = k = v = 1, two tokens: S_1 = 1, S_2 = 2."""
    one = np.ones((1, 1, 2, 1))
    assert lesson.recurrence(one, one, one).ravel().tolist() == [1.0, 2.0]
    # read before the update: o_t = q_t S_{t-1}
    assert lesson.recurrence(one, one, one, read_first=True).ravel().tolist() == [0.0, 1.0]
    g = np.log(np.full((1, 1, 2), 0.5))     # decay 1/2 per step
    assert np.allclose(lesson.recurrence(one, one, one, g).ravel(), [1.0, 1.5])
    # the decay after the write: S_1 = (0 + 1) / 2, S_2 = (1/2 + 1) / 2
    assert np.allclose(lesson.recurrence(one, one, one, g, decay_after_write=True).ravel(),
                       [0.5, 0.75])
    beta = np.full((1, 1, 2), 0.5)        # the delta rule: w = beta (v - k S)
    assert np.allclose(lesson.recurrence(one, one, one, beta=beta).ravel(), [0.5, 0.75])
    # beta on k only: w = v - beta k S
    assert np.allclose(lesson.recurrence(one, one, one, beta=beta, beta_on_keys=True).ravel(),
                       [1.0, 1.5])


def test_recurrence_against_a_loop_per_sequence():
    q, k, v, log_decay, beta = draw(2, 2, 9, 4, 3, dtype="float64")
    o = np.zeros(v.shape)
    for b in range(2):
        for n in range(2):
            S = np.zeros((4, 3))
            for t in range(9):
                S = np.exp(log_decay[b, n, t]) * S
                w = beta[b, n, t] * (v[b, n, t] - k[b, n, t] @ S)
                S = S + np.outer(k[b, n, t], w)
                o[b, n, t] = q[b, n, t] @ S
    assert np.allclose(lesson.recurrence(q, k, v, log_decay, beta), o)


@pytest.mark.parametrize("T, chunk", [(12, 4), (10, 4), (8, 8), (5, 16)])
def test_chunkwise_is_the_recurrence(T, chunk):
    q, k, v, log_decay, beta = draw(1, 2, T, 4, 3)
    for gates in ({}, {"log_decay": log_decay}, {"beta": beta},
                  {"log_decay": log_decay, "beta": beta}):
        assert np.allclose(lesson.chunkwise(q, k, v, chunk=chunk, **gates),
                           lesson.recurrence(q, k, v, **gates), atol=1e-10)


def test_chunkwise_near_misses_are_other_recurrences():
    q, k, v, log_decay, beta = draw(1, 2, 12, 4, 3)
    # the state dropped at every chunk: each chunk a sequence of its own
    alone = np.concatenate([lesson.recurrence(q[:, :, s:s + 4], k[:, :, s:s + 4],
                                              v[:, :, s:s + 4], beta=beta[:, :, s:s + 4])
                            for s in (0, 4, 8)], axis=2)
    assert np.allclose(lesson.chunkwise(q, k, v, beta=beta, chunk=4, carry=False), alone)
    # the state carried from head 0 into head 1: one sequence twice as long
    joined = [x.reshape(1, 1, 24, -1) for x in (q, k, v)]
    assert np.allclose(lesson.chunkwise(q, k, v, chunk=4, reset_per_head=False),
                       lesson.recurrence(*joined).reshape(v.shape))
    right = lesson.chunkwise(q, k, v, log_decay, beta, chunk=4)
    for flags in (dict(causal="j<i"), dict(causal="all"), dict(state_first=True),
                  dict(decay_twice=True), dict(exclusive=True), dict(since_start=False),
                  dict(until_end=False), dict(across=False), dict(solve="j<=i"),
                  dict(solve="undecayed"), dict(solve=None), dict(erase="undecayed"),
                  dict(erase="none"), dict(beta_on_keys=True), dict(beta_in_lower=False),
                  dict(beta_in_rhs=False), dict(last_row_unsolved=True),
                  dict(read_bf16=True), dict(predict_bf16=True), dict(state_bf16=True)):
        wrong = lesson.chunkwise(q, k, v, log_decay, beta, chunk=4, **flags)
        assert not np.allclose(wrong, right, rtol=1e-4, atol=1e-6), flags


def test_bf16_rounds_to_8_significant_bits():
    assert lesson.bf16(1 + 2.0 ** -9) == 1.0
    assert lesson.bf16(1 + 2.0 ** -7) == 1 + 2.0 ** -7


def test_expected_and_wrong():
    q, k, v, log_decay, beta = draw(1, 1, 8, 4, 3)
    expected, wrong = lesson.expected_and_wrong(q, k, v, log_decay, beta, chunk=4,
                                                dtype="float32")
    assert expected.dtype == np.float32
    assert np.array_equal(expected, lesson.recurrence(q, k, v, log_decay, beta).astype("float32"))
    assert np.array_equal(wrong(carry=False)(), lesson.chunkwise(
        q, k, v, log_decay, beta, chunk=4, carry=False).astype("float32"))


# --- the likely= dicts: every near-miss differs from the right answer ---------------

def differ(likely, right):
    for name, make in likely.items():
        yours = make()
        assert yours.shape == right.shape, name
        assert not np.allclose(yours, right, rtol=1e-4, atol=1e-6), name


def test_likely_dicts_are_wrong_answers():
    q, k, v, log_decay, beta = draw(1, 2, 16, 4, 3)
    right = lesson.recurrence(q, k, v, log_decay, beta).astype("float32")
    differ(lesson.recurrent_likely(q, k, v, log_decay, beta, "float32"), right)
    _, wrong = lesson.expected_and_wrong(q, k, v, log_decay, beta, chunk=4, dtype="float32")
    likely = lesson.gated_delta_likely(wrong, q, k, v, log_decay, beta, chunk=4,
                                       dtype="float32")
    assert set(lesson.delta_likely(wrong)) < set(likely)
    differ(likely, right)
    right = lesson.recurrence(q, k, v, log_decay).astype("float32")
    _, wrong = lesson.expected_and_wrong(q, k, v, log_decay, chunk=4, dtype="float32")
    differ(lesson.gating_likely(wrong), right)
    right = lesson.recurrence(q, k, v).astype("float32")
    _, wrong = lesson.expected_and_wrong(q, k, v, chunk=4, dtype="float32")
    differ(lesson.chunked_likely(wrong), right)
    within = lesson.chunkwise(q, k, v, chunk=4, carry=False).astype("float32")
    differ(lesson.intra_likely(q, k, v, chunk=4, dtype="float32"), within)


def test_substitution_likely_by_hand():
    """lower = [[0, 0], [a, 0]]: u = (r0, r1 - a r0); the last row unsolved keeps r1;
    every row changed at every step subtracts a r0 from both."""
    a, r = 0.5, np.array([[2.0], [3.0]])
    lower = np.array([[0.0, 0.0], [a, 0.0]], np.float32)
    expected = np.array([[2.0], [2.0]])
    likely = lesson.substitution_likely(lower, r, expected)
    assert likely["last_row_unsolved"]().tolist() == [[2.0], [3.0]]
    assert likely["all_rows_changed"]().tolist() == [[1.0], [2.0]]
    # rows <= i change at step i: step 1 subtracts a r0 from row 0 too
    assert likely["earlier_rows_changed"]().tolist() == [[1.0], [2.0]]


def test_api_likely():
    q, k, v, log_decay, beta = draw(1, 1, 20, 4, 3)
    gate = {"log_decay": log_decay, "beta": beta}
    likely = lesson.api_likely(q, k, v, gate, T=20, chunk=16, dtype="float32")
    assert set(likely) == {"padded_in_front", "cut_from_end", "gates_swapped"}
    # chunk 16, T 20: 12 zero tokens in front; the output of token t is the recurrence's
    # at t on the padded sequence, whose first 12 tokens write nothing
    pad = [np.pad(x, ((0, 0), (0, 0), (12, 0), (0, 0))) for x in (q, k, v)]
    gates = {key: np.pad(x, ((0, 0), (0, 0), (12, 0))) for key, x in gate.items()}
    assert np.allclose(likely["padded_in_front"](),
                       lesson.recurrence(*pad, **gates)[:, :, :20].astype("float32"))
    assert np.allclose(likely["gates_swapped"](),
                       lesson.recurrence(q, k, v, log_decay=beta, beta=log_decay))
    # T a whole number of chunks: no padding, and the right answer
    whole = lesson.api_likely(q[:, :, :16], k[:, :, :16], v[:, :, :16], {}, T=16, chunk=16,
                              dtype="float32")
    assert set(whole) == {"padded_in_front", "cut_from_end"}
    assert np.allclose(whole["padded_in_front"](), lesson.recurrence(
        q[:, :, :16], k[:, :, :16], v[:, :, :16]))


# --- budgets ----------------------------------------------------------------------------

def test_flops_by_hand():
    # per chunk: q k^T and scores @ v (2 C C (H + Hv)), q S and K^T V (2 * 2 C H Hv)
    assert lesson.chunk_flops(1, 1, 16, 4, 2, 8) == 2 * (2 * 64 * 6 + 4 * 8 * 4 * 2)
    assert lesson.intra_flops(1, 1, 16, 4, 2, 8) == 2 * 2 * 64 * 6
    # chunks of 1: chunk c attends to c + 1 earlier chunks (itself included)
    assert lesson.quadratic_flops(1, 1, 2, 4, 2, 1) == 2 * 6 + 2 * 2 * 6
    assert [lesson.api_chunk(T, 64) for T in (1, 20, 64, 3000)] == [8, 24, 64, 64]


def test_chunked_budgets_are_the_reference_kernels():
    q, k, v, _, _ = draw(1, 2, 16, 16, 8)
    ran = measure(linear.chunked_call, q, k, v, kernel=linear.linear_kernel, chunk=8,
                  structure=None)
    assert ran.work == lesson.chunk_flops(1, 2, 16, 16, 8, 8)
    assert [found.total for found in ran.vmem] == [lesson.chunked_vmem(8, 16, 8, 4)]
    lesson.check_moves_once(ran, q, k, v, out_bytes=v.nbytes)


def test_delta_flops_are_the_reference_kernels():
    q, k, v, _, beta = draw(1, 1, 16, 16, 8)
    ran = measure(linear.chunked_call, q, k, v, beta, kernel=linear.delta_kernel, chunk=8,
                  structure=None)
    assert ran.work == lesson.chunk_flops(1, 1, 16, 16, 8, 8, delta=True)


def test_intra_flops_are_the_reference_kernels():
    q, k, v, _, _ = draw(1, 2, 16, 16, 8)
    ran = measure(linear.intra_chunk, q, k, v, chunk=8, structure=None)
    assert ran.work == lesson.intra_flops(1, 2, 16, 16, 8, 8)


def test_check_moves_once_fails_an_input_read_twice():
    q, k, v, _, _ = draw(1, 1, 16, 16, 8)
    ran = measure(lambda q, v: linear.chunked_call(q, q, v, kernel=linear.linear_kernel,
                                                   chunk=8), q, v, structure=None)
    assert kind_of(lambda: lesson.check_moves_once(ran, q, v, out_bytes=v.nbytes)) == "traffic"


def test_api_flops_and_chunk_rounding_on_the_reference():
    q, k, v, log_decay, beta = draw(1, 1, 20, 16, 8)
    names = ("linear_attention", "gated_delta_rule")

    def both(q, k, v, beta, log_decay):
        return (linear.linear_attention(q, k, v, chunk=64),
                linear.gated_delta_rule(q, k, v, beta, log_decay, chunk=64))

    ran = measure(both, q, k, v, beta, log_decay, structure=None)
    assert ran.work == lesson.api_flops(1, 1, 20, 16, 8, 64, names)
    lesson.check_chunk_rounded(ran, T=20, chunk=64)
    ran = measure(linear.chunked_call, q, k, v, kernel=linear.linear_kernel, chunk=20,
                  structure=None)   # a chunk of T itself, 20 rows: not whole tiles
    assert kind_of(lambda: lesson.check_chunk_rounded(ran, T=20, chunk=64)) == \
        "chunk_not_rounded"


# --- checks on a helper's output -----------------------------------------------------------

def test_check_factors_and_within_masked():
    C = 4
    good = [np.zeros((C, C)), np.zeros((C, 1)), np.zeros((C, 1)), np.zeros((1, 1))]
    assert [f.shape for f in lesson.check_factors(tuple(good), C)] == [f.shape for f in good]
    assert kind_of(lambda: lesson.check_factors(good[:3], C)) == "factors_returned"
    assert kind_of(lambda: lesson.check_factors([good[0], np.zeros(C), *good[2:]], C)) == \
        "factor_shape"
    within = np.tril(np.ones((C, C)))
    lesson.check_within_masked(within)
    within[0, 1] = np.nan                    # above the diagonal only: inf * 0
    assert kind_of(lambda: lesson.check_within_masked(within)) == "decay_overflow"
    within[1, 0] = np.nan                    # on or below it too: some other NaN
    lesson.check_within_masked(within)


def test_check_names_bad_argument():
    q, k, v, _, beta = draw(1, 2, 32, 16, 16)
    lesson.check_names_bad_argument(linear.delta_rule, q, k, v[:, :, :24], beta, chunk=16,
                                    bad="v")

    def says_nothing(q, k, v, beta, *, chunk):
        raise ValueError("wrong")

    def accepts(q, k, v, beta, *, chunk):
        return q

    for function in (says_nothing, accepts):
        assert kind_of(lambda: lesson.check_names_bad_argument(
            function, q, k, v, beta, chunk=12, bad="chunk")) == "argument_check"


# --- checks read from a kernel's program, on small kernels ---------------------------

def state_kernel(q_ref, k_ref, o_ref, state_ref, *, reset_under_when, narrow):
    if reset_under_when:
        @pl.when(pl.program_id(0) == 0)
        def start():
            state_ref[...] = jnp.zeros_like(state_ref)
    else:
        state_ref[...] = jnp.zeros_like(state_ref)
    q, k, state = q_ref[...], k_ref[...], state_ref[...]
    x = {"q": q, "k": k, None: q}[narrow]
    if narrow:
        read = jnp.dot(x.astype(jnp.bfloat16), state.astype(jnp.bfloat16),
                       preferred_element_type=jnp.float32)
    else:
        read = jnp.dot(x, state, preferred_element_type=jnp.float32)
    o_ref[...] = read
    state_ref[...] = state + jnp.dot(k.T, q, preferred_element_type=jnp.float32)


def with_state(q, k, *, reset_under_when=True, narrow=None, semantics="arbitrary"):
    block = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(
        functools.partial(state_kernel, reset_under_when=reset_under_when, narrow=narrow),
        out_shape=jax.ShapeDtypeStruct(q.shape, jnp.float32), grid=(q.shape[0] // 8,),
        in_specs=[block, block], out_specs=block,
        scratch_shapes=[pltpu.VMEM((128, 128), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=(semantics,)),
    )(q, k)


@pytest.mark.parametrize("change, check, kind", [
    (dict(), None, None),
    (dict(semantics="parallel"), lesson.check_chunks_in_order, "parallel_chunks"),
    (dict(reset_under_when=False), lesson.check_state_reset_once, "reset_every_step"),
    (dict(narrow="q"), lesson.check_state_read_in_float32, "state_read_in_bf16"),
    (dict(narrow="k"), lesson.check_state_read_in_float32, "prediction_in_bf16"),
], ids=["right", "parallel", "reset", "q S in bf16", "k S in bf16"])
def test_state_checks(change, check, kind):
    q, k = (np.random.default_rng(s).standard_normal((16, 128)).astype(np.float32)
            for s in (0, 1))
    ran = measure(functools.partial(with_state, **change), q, k, structure=None)
    checks = (lesson.check_chunks_in_order, lesson.check_state_reset_once,
              lesson.check_state_read_in_float32)
    for other in checks:
        if other is not check:
            other(ran)
    if check is not None:
        assert kind_of(lambda: check(ran)) == kind


def decay_kernel(x_ref, o_ref, *, masked_first):
    x = x_ref[...]
    row = jax.lax.broadcasted_iota(jnp.int32, x.shape, 0)
    col = jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)
    if masked_first:
        o_ref[...] = jnp.exp(jnp.where(col <= row, x, -jnp.inf))
    else:
        o_ref[...] = jnp.exp(x) * (col <= row).astype(jnp.float32)


@pytest.mark.parametrize("masked_first", [True, False], ids=["masked, then exp",
                                                             "exp times a mask"])
def test_check_decay_masked(masked_first):
    x = np.zeros((8, 128), np.float32)
    ran = measure(lambda x: pl.pallas_call(
        functools.partial(decay_kernel, masked_first=masked_first),
        out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32))(x), x, structure=None)
    if masked_first:
        lesson.check_decay_masked(ran)
    else:
        assert kind_of(lambda: lesson.check_decay_masked(ran)) == "decay_overflow"
