"""reference/flash.py's flash_attention against JAX's own Pallas TPU flash attention
(jax.experimental.pallas.ops.tpu.flash_attention), both in TPU interpret mode:
forward and gradients, causal or not, float32 and bfloat16, grouped-query heads.

JAX's kernel needs as many K/V heads as query heads, block sizes that divide the
lengths, and sm_scale given explicitly (its default is 1.0). It gets K/V heads
repeated with jnp.repeat inside the differentiated function, so its dk and dv are
summed over each group as ours are.
"""
import importlib.util
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas.ops.tpu import flash_attention as jax_flash

from pytest_pallas_hints import runtime

ROOT = Path(__file__).resolve().parent.parent


def load_reference():
    path = ROOT / "reference" / "flash.py"
    spec = importlib.util.spec_from_file_location("reference_flash", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


flash = load_reference()


@pytest.fixture(autouse=True)
def interpret_mode():
    """TPU interpret mode for every kernel here, as the plugin sets it for learners."""
    runtime.use_interpret_mode(True)


def ours(q, k, v, *, causal):
    return flash.flash_attention(q, k, v, causal=causal)   # sm_scale=None: 1 / sqrt(H)


def theirs(q, k, v, *, causal):
    (_, N, T, H), (K, S) = q.shape, k.shape[1:3]
    k, v = jnp.repeat(k, N // K, axis=1), jnp.repeat(v, N // K, axis=1)
    blocks = jax_flash.BlockSizes(
        block_q=min(128, T), block_k_major=min(128, S), block_k=min(128, S), block_b=1,
        block_q_major_dkv=min(128, T), block_k_major_dkv=min(128, S),
        block_k_dkv=min(128, S), block_q_dkv=min(128, T),
        block_k_major_dq=min(128, S), block_k_dq=min(128, S), block_q_dq=min(128, T))
    return jax_flash.flash_attention(q, k, v, causal=causal, sm_scale=1 / math.sqrt(H),
                                     block_sizes=blocks)


def forward_and_grads(attend, q, k, v, do, *, causal):
    o, vjp = jax.vjp(lambda q, k, v: attend(q, k, v, causal=causal), q, k, v)
    return (o, *vjp(do))


@pytest.mark.parametrize("B, N, K, T, S, H, causal, dtype", [
    pytest.param(1, 2, 2, 256, 256, 64, False, "float32", id="f32 N=K=2 T=S=256"),
    pytest.param(1, 1, 1, 256, 256, 64, True, "float32", id="f32 causal T=S=256"),
    pytest.param(1, 2, 1, 256, 256, 128, True, "bfloat16", id="bf16 causal N=2 K=1 T=S=256"),
    pytest.param(1, 1, 1, 128, 384, 128, False, "bfloat16", id="bf16 T=128 S=384"),
])
def test_matches_jax_pallas_flash_attention(B, N, K, T, S, H, causal, dtype):
    gen = np.random.default_rng(T + S + N + K + causal)
    q, do = (jnp.asarray(gen.standard_normal((B, N, T, H)), dtype) for _ in range(2))
    k, v = (jnp.asarray(gen.standard_normal((B, K, S, H)), dtype) for _ in range(2))

    @jax.jit
    def run_both(q, k, v, do):
        return (forward_and_grads(ours, q, k, v, do, causal=causal),
                forward_and_grads(theirs, q, k, v, do, causal=causal))

    mine, reference = run_both(q, k, v, do)
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    for name, a, b in zip(("o", "dq", "dk", "dv"), mine, reference):
        assert a.dtype == b.dtype == jnp.dtype(dtype) and a.shape == b.shape, name
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        error = np.abs(a - b).max() / np.abs(b).max()
        assert error <= tolerance, f"{name}: max |ours - jax| / max |jax| = {error:.2e}"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_forward_and_backward_are_pallas_kernels(causal):
    q = jnp.zeros((1, 4, 200, 64), jnp.bfloat16)
    k = v = jnp.zeros((1, 2, 300, 64), jnp.bfloat16)
    forward = str(jax.make_jaxpr(lambda q, k, v: ours(q, k, v, causal=causal))(q, k, v))
    assert forward.count("pallas_call") >= 1
    grad = str(jax.make_jaxpr(jax.grad(
        lambda q, k, v: ours(q, k, v, causal=causal).astype(jnp.float32).sum(),
        argnums=(0, 1, 2)))(q, k, v))
    assert grad.count("pallas_call") >= 3   # the forward, dQ, and dK/dV


@pytest.mark.parametrize("bad, message", [
    (dict(k=(1, 3, 64, 32), v=(1, 3, 64, 32)), "multiple of the number of K/V heads K=3"),
    (dict(v=(1, 2, 48, 32)), "k and v must have one shape"),
    (dict(k=(1, 2, 64, 16), v=(1, 2, 64, 16)), "[B=1, K, S, H=32]"),
    (dict(q=(4, 64, 32)), "must be 4-D"),
    (dict(block_q=100), "block_q=100 must be a positive multiple of 8"),
    (dict(dtype="bfloat16"), "must share one floating dtype"),
])
def test_arguments_are_checked_up_front(bad, message):
    shapes = dict(q=(1, 4, 64, 32), k=(1, 2, 64, 32), v=(1, 2, 64, 32))
    shapes.update({name: bad[name] for name in ("q", "k", "v") if name in bad})
    q, k, v = (jnp.zeros(shapes[name], jnp.float32) for name in ("q", "k", "v"))
    blocks = {name: bad[name] for name in ("block_q", "block_kv") if name in bad}
    if bad.get("dtype"):
        k = k.astype(bad["dtype"])
    with pytest.raises(ValueError) as info:
        flash.flash_attention(q, k, v, **blocks)
    assert message in str(info.value)
