"""reference/ragged_dot.py against JAX: jax.lax.ragged_dot (precision HIGHEST) forward
and both gradients, and the megablox Pallas TPU kernels
(jax.experimental.pallas.ops.tpu.megablox: gmm, tgmm, make_group_metadata), all in TPU
interpret mode.

Group patterns: empty groups (first, middle, last), one group, groups smaller than a
tile, every row in the last group, M not a multiple of tm, K and N not multiples of
their tiles; float32 and bfloat16. Megablox needs M to be a multiple of tm: it is
compared only there. Its metadata pads past num_tiles with the last group (as
jnp.repeat does), ours with the last real visit (so that a padding step fetches
nothing): the first num_tiles entries must agree, and ours must repeat its last one.
"""
import importlib
import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pytest_pallas_hints import runtime

ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2}   # relative to max |expected|
megablox = importlib.import_module("jax.experimental.pallas.ops.tpu.megablox.gmm")


def load_reference():
    path = ROOT / "reference" / "ragged_dot.py"
    spec = importlib.util.spec_from_file_location("reference_ragged_dot", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rd = load_reference()


@pytest.fixture(autouse=True)
def interpret_mode():
    """TPU interpret mode for every kernel here, as the plugin sets it for learners."""
    runtime.use_interpret_mode(True)


def close(yours, expected, dtype):
    yours, expected = np.asarray(yours, np.float64), np.asarray(expected, np.float64)
    assert yours.shape == expected.shape
    scale = max(1.0, float(np.abs(expected).max(initial=0)))
    error = float(np.abs(yours - expected).max(initial=0))
    assert error <= TOLERANCE[dtype] * scale, f"max error {error:.3g} (scale {scale:.3g})"


def lax_ragged_dot(lhs, rhs, sizes):
    return jax.lax.ragged_dot(lhs, rhs, sizes, precision=jax.lax.Precision.HIGHEST,
                              preferred_element_type=jnp.float32)


CASES = [   # M, K, N, group sizes, tiling, dtype
    pytest.param(256, 128, 128, [0, 100, 0, 156, 0], (128, 128, 128), "float32",
                 id="empty groups first, middle and last"),
    pytest.param(128, 256, 128, [128], (64, 128, 128), "bfloat16", id="one group bf16"),
    pytest.param(128, 128, 256, [5, 3, 120], (64, 128, 128), "float32",
                 id="groups smaller than a tile"),
    pytest.param(256, 128, 128, [0, 0, 0, 256], (128, 128, 128), "bfloat16",
                 id="every row in the last group bf16"),
    pytest.param(200, 128, 128, [50, 0, 150], (128, 128, 128), "float32",
                 id="M=200 not a multiple of tm"),
    pytest.param(136, 200, 160, [7, 60, 0, 69], (64, 128, 128), "bfloat16",
                 id="M, K, N not multiples of the tiles bf16"),
    pytest.param(64, 128, 128, [9, 1, 0, 30, 4, 0, 20, 0], (64, 128, 128), "float32",
                 id="eight groups in one tile"),
]


@pytest.mark.parametrize("M, K, N, sizes, tiling, dtype", CASES)
def test_forward_and_gradients_match_lax_ragged_dot(M, K, N, sizes, tiling, dtype):
    gen = np.random.default_rng(M * K + N)
    E = len(sizes)
    sizes = jnp.array(sizes, jnp.int32)
    lhs = jnp.asarray(gen.standard_normal((M, K)), dtype)
    rhs = jnp.asarray(gen.standard_normal((E, K, N)), dtype)
    grad = jnp.asarray(gen.standard_normal((M, N)), dtype)
    out, vjp = jax.vjp(lambda l, r: rd.ragged_dot(l, r, sizes, tiling=tiling), lhs, rhs)
    d_lhs, d_rhs = vjp(grad)
    wide = [x.astype(jnp.float32) for x in (lhs, rhs, grad)]
    expected, lax_vjp = jax.vjp(lambda l, r: lax_ragged_dot(l, r, sizes), *wide[:2])
    expected_d_lhs, expected_d_rhs = lax_vjp(wide[2])
    assert out.dtype == d_lhs.dtype == d_rhs.dtype == jnp.dtype(dtype)
    close(out, expected, dtype)
    close(d_lhs, expected_d_lhs, dtype)
    close(d_rhs, expected_d_rhs, dtype)
    empty = np.flatnonzero(np.asarray(sizes) == 0)
    assert not np.asarray(d_rhs, np.float64)[empty].any(), "an empty group's d rhs is not 0"

    tm = min(tiling[0], -(-M // 8) * 8)
    if M % tm == 0:   # megablox's shapes: compare kernel with kernel
        theirs = megablox.gmm(lhs, rhs, sizes, jnp.float32, tiling=tiling)
        close(rd.gmm(lhs, rhs, sizes, tiling=tiling), theirs, dtype)
        theirs = megablox.tgmm(lhs.T, grad, sizes, jnp.float32, tiling=tiling)
        close(d_rhs, theirs, dtype)


def random_sizes(gen, M, E):
    cuts = np.sort(gen.integers(0, M + 1, E - 1))
    return np.diff(np.concatenate([[0], cuts, [M]])).astype(np.int32)


@pytest.mark.parametrize("visit_empty_groups", [False, True])
def test_metadata_matches_megablox(visit_empty_groups):
    """Many random group patterns (empty groups, groups inside one tile, groups across
    several tiles), M a multiple of tm as megablox needs."""
    gen = np.random.default_rng(14)
    for _ in range(60):
        E, tm = int(gen.integers(1, 9)), int(gen.choice([8, 16, 128]))
        M = tm * int(gen.integers(1, 6))
        sizes = jnp.asarray(random_sizes(gen, M, E))
        if gen.random() < 0.2:
            sizes = sizes.at[-1].set(0).at[0].add(sizes[-1])   # an empty last group
        ours = rd.make_group_metadata(sizes, M, tm, visit_empty_groups=visit_empty_groups)
        (offsets, group_ids, m_tile_ids), num_tiles = megablox.make_group_metadata(
            group_sizes=sizes, m=M, tm=tm, start_group=jnp.int32(0), num_nonzero_groups=E,
            visit_empty_groups=visit_empty_groups)
        n = int(num_tiles)
        said = f"sizes {np.asarray(sizes).tolist()} M={M} tm={tm}"
        assert int(ours[3]) == n, said
        assert ours[1].shape == group_ids.shape == (M // tm + E - 1,), said
        np.testing.assert_array_equal(ours[0], offsets, err_msg=said)
        np.testing.assert_array_equal(ours[1][:n], group_ids[:n], err_msg=said)
        np.testing.assert_array_equal(ours[2][:n], m_tile_ids[:n], err_msg=said)
        assert (ours[1][n:] == ours[1][n - 1]).all() and (ours[2][n:] == ours[2][n - 1]).all()


def test_metadata_needs_at_most_the_static_number_of_visits():
    """tiles_m + E - 1 visits suffice for any sizes, M not a multiple of tm included."""
    gen = np.random.default_rng(15)
    for _ in range(100):
        E, tm, M = int(gen.integers(1, 12)), 8, int(gen.integers(1, 60))
        sizes = jnp.asarray(random_sizes(gen, M, E))
        for flag in (False, True):
            _, group_ids, m_tile_ids, num_tiles = rd.make_group_metadata(
                sizes, M, tm, visit_empty_groups=flag)
            assert int(num_tiles) <= group_ids.shape[0] == -(-M // tm) + E - 1
            assert int(m_tile_ids.max()) < -(-M // tm)
