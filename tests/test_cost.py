"""The TPU cost model against cases worked out by hand: a tiled matmul, a causal flash
forward against a dense one, a double-buffered copy, and a kernel that does not fit."""
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_pallas_hints import checking, cost, footprint
from pytest_pallas_hints.checking import measure

sys.path.insert(0, str(Path(__file__).parent))
from test_lessons import X, column_sum, double_buffered  # noqa: E402

V5E, V6E = cost.CHIPS["v5e"], cost.CHIPS["v6e"]


def matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)
    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def matmul(a, b, block=128):
    (M, K), (_, N) = a.shape, b.shape
    return pl.pallas_call(
        matmul_kernel, out_shape=jax.ShapeDtypeStruct((M, N), a.dtype),
        grid=(M // block, N // block, K // block),
        in_specs=[pl.BlockSpec((block, block), lambda i, j, k: (i, k)),
                  pl.BlockSpec((block, block), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((block, block), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((block, block), jnp.float32)])(a, b)


def test_a_tiled_matmul():
    a = np.ones((256, 256), np.float32)
    (c,) = cost.of(measure(matmul, a, a, structure=None))
    assert c.flops == 2 * 256 ** 3 and c.dot_flops == {"float32": 2 * 256 ** 3}
    block = 128 * 128 * 4
    assert c.bytes == 8 * block + 8 * block + 4 * block   # a and b every step, o per tile
    assert c.intensity == pytest.approx(2 * 256 ** 3 / (20 * block))
    assert c.vmem.total == 2 * block * 3 + block          # a, b, o double-buffered; acc
    seconds, kind = c.bound(V5E)
    assert kind == "memory-bound" and seconds == pytest.approx(20 * block / 819e9)
    assert c.bound(V6E)[0] == pytest.approx(20 * block / 1640e9)
    assert c.line(V5E) == ("on TPU v5e: >= 1.6 µs (memory-bound, 25.6 flop/B), "
                           "VMEM 448 KiB of 16 MiB")


def test_causal_flash_costs_what_it_skips():
    from pytest_pallas_hints import chapters

    chapters.configure("reference")
    try:
        flash = chapters.chapter("flash")
    finally:
        chapters.configure("exercises")
    B, N, T, H = 1, 1, 512, 128
    q = np.random.default_rng(0).normal(size=(B, N, T, H)).astype(np.float32)
    dense, causal = (cost.of(measure(flash.flash_forward, q, q, q, causal=c, block_q=128,
                                     block_kv=128, structure=None))[0] for c in (False, True))
    per_block = 2 * (2 * 128 * 128 * H)                     # q k^T and p @ v
    assert dense.flops == 16 * per_block and causal.flops == 10 * per_block
    assert causal.bytes < dense.bytes
    assert causal.bound(V5E)[0] < dense.bound(V5E)[0]


def test_a_double_buffered_copy_moves_its_bytes_once():
    (c,) = cost.of(measure(column_sum(double_buffered, 2), X, structure=None))
    assert c.flops == 0 and c.bytes == X.nbytes + X.shape[1] * 4
    assert c.bound(V5E) == (pytest.approx((X.nbytes + X.shape[1] * 4) / 819e9), "memory-bound")
    assert c.elementwise > 0 and "no HBM traffic" not in c.line(V5E)


def test_a_kernel_that_does_not_fit_is_named_with_its_largest_blocks():
    x = jax.ShapeDtypeStruct((8192, 1024), jnp.float32)   # 4 MiB blocks: 28 MiB in all
    program = checking._trace(lambda x: matmul(x, x.T[:1024, :1024], block=1024), (x,), {})
    big = cost.KernelCost("matmul_kernel", {"float32": 1}, 0, 1, footprint.vmem(
        program.sites[0].call))
    assert V5E.scoped < big.vmem.total < V6E.scoped
    warning = big.warning(V5E)
    assert warning.startswith("matmul_kernel() needs 28 MiB of VMEM on TPU v5e, more than the "
                              "16 MiB a kernel gets by default")
    assert "a_ref blocks (2 buffers) 8 MiB" in warning and big.warning(V6E) == ""
    small = cost.KernelCost("k", {}, 0, 0, footprint.Footprint("k", (("acc", 1024),)))
    assert small.warning(V5E) == "" and "no HBM traffic" in small.line(V5E)


def test_the_chip_table_holds_the_public_figures():
    assert (V5E.bf16, V5E.int8, V5E.hbm) == (197e12, 394e12, 819e9)
    assert (V6E.bf16, V6E.int8, V6E.hbm) == (918e12, 1836e12, 1640e9)
    assert V5E.scoped == 16 << 20 and V6E.scoped == 32 << 20
    source = Path(cost.__file__).read_text()
    for url in ("cloud.google.com/tpu/docs/v5e", "cloud.google.com/tpu/docs/v6e",
                "tpu_info.py", "pallas/tpu/pipelining"):
        assert url in source


def test_a_cost_survives_the_trip_to_the_controller():
    c = cost.KernelCost("k", {"bfloat16": 10}, 3, 7, footprint.Footprint("k", (("a", 1),)))
    assert cost.KernelCost.from_dict(c.to_dict()) == c
