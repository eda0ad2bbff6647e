"""The TPU cost model against cases worked out by hand: a tiled matmul, a causal flash
forward against a dense one, a double-buffered copy, a kernel that does not fit, and
five kernels projected to their tests' TPU sizes (flash.causal dense and causal and
fetching skipped blocks, matmul's blocks growing, basics.tiled, norms.row_softmax),
VMEM padded to tiles and pl.Buffered."""
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
    assert c.steps == 8 and c.minimum == 3 * 4 * block    # a, b and o once each
    # HBM: 20 blocks / 819 GB/s = 1.6 µs; the core: 8 steps x 0.35 µs = 2.8 µs plus
    # the MXU's 8 dots of 128^3 (21.3 ns each): the step overhead bounds it.
    seconds, kind = c.bound(V5E)
    mxu = 8 * 2 * 128 ** 3 / 197e12
    assert kind == "overhead-bound" and seconds == pytest.approx(mxu + 8 * 0.35e-6)
    assert c.memory_seconds(V6E) == pytest.approx(20 * block / 1640e9)
    assert c.line(V5E) == ("on TPU v5e: >= 2.97 µs (overhead-bound, 25.6 flop/B), "
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
    assert causal.mxu_seconds(V5E) == pytest.approx(dense.mxu_seconds(V5E) * 10 / 16)
    assert causal.bound(V5E)[0] < dense.bound(V5E)[0]


def test_a_double_buffered_copy_moves_its_bytes_once():
    (c,) = cost.of(measure(column_sum(double_buffered, 2), X, structure=None))
    assert c.flops == 0 and c.bytes == X.nbytes + X.shape[1] * 4
    assert c.memory_seconds(V5E) == pytest.approx((X.nbytes + X.shape[1] * 4) / 819e9)
    assert c.elementwise > 0 and "no HBM traffic" not in c.line(V5E)


def test_a_kernel_that_does_not_fit_is_named_with_its_largest_blocks():
    x = jax.ShapeDtypeStruct((8192, 1024), jnp.float32)   # 4 MiB blocks: 28 MiB in all
    program = checking._trace(lambda x: matmul(x, x.T[:1024, :1024], block=1024), (x,), {})
    big = cost.KernelCost("matmul_kernel", {"float32": 1}, 0, 1, footprint.on_chip(
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
    assert (V5E.mxu, V6E.mxu, V5E.step) == (128, 256, 0.35e-6)
    assert V5E.ridge == pytest.approx(240.5, abs=0.1)
    h100 = cost.CHIPS["h100"]
    assert (h100.bf16, h100.hbm, h100.scoped) == (989e12, 3.35e12, 227 * 1024)
    source = Path(cost.__file__).read_text()
    for url in ("cloud.google.com/tpu/docs/v5e", "cloud.google.com/tpu/docs/v6e",
                "tpu_info", "pallas/tpu/pipelining", "pallas/tpu/matmul",
                "jax.lax.Precision", "scaling-book", "nvidia.com/en-us/data-center/h100",
                "hopper-tuning-guide"):
        assert url in source
    assert "/" not in cost.__doc__.split("tpu_info")[1][:3]   # a module, not a stale path


def test_a_cost_survives_the_trip_to_the_controller():
    c = cost.KernelCost("k", {"bfloat16": 10}, 3, 7, footprint.Footprint("k", (("a", 1),)))
    assert cost.KernelCost.from_dict(c.to_dict()) == c


# ------------------------------------------------ at the tests' TPU sizes ---

def _reference(name):
    from pytest_pallas_hints import chapters

    chapters.configure("reference")
    try:
        return chapters.chapter(name)
    finally:
        chapters.configure("exercises")


def _projected(fn, *args, **static):
    traced = checking._trace(fn, args, static)
    return cost.project(traced, args, "reference", "tpu")


F32, BF16 = jax.ShapeDtypeStruct, None
KIB, MIB = 1024, 1 << 20


def test_flash_causal_at_its_tpu_size_costs_half_the_dense_one():
    """B=4 N=16 T=S=4096 H=128, blocks of 128 (test_causal's tpu configuration):
    64 heads of 32 x 32 block pairs, 528 on or below the diagonal."""
    flash = _reference("flash")
    q = jax.ShapeDtypeStruct((4, 16, 4096, 128), jnp.float32)
    (causal,) = _projected(flash.flash_causal, q, q, q, block_q=128, block_kv=128)
    (dense,) = _projected(flash.flash_forward, q, q, q, causal=False, block_q=128,
                          block_kv=128)
    pair = 2 * (2 * 128 * 128 * 128)                      # s = q k^T and p v
    assert causal.flops == 64 * 528 * pair == 283_467_841_536
    assert dense.flops == 64 * 1024 * pair
    block, whole = 128 * 128 * 4, 4 * 16 * 4096 * 128 * 4   # 64 KiB; 128 MiB per array
    # q read once, o written once; k and v fetched once per visible pair (the index
    # maps clamp a skipped step to the block already in VMEM), but for q block 1's
    # first, block 0, still in VMEM from q block 0's steps
    assert causal.bytes == 2 * whole + 2 * 64 * 527 * block == 4_689_231_872
    assert dense.bytes == 2 * whole + 2 * 64 * 1024 * block + 4 * 16 * 4096 * 4   # + lse
    assert causal.steps == dense.steps == 65_536
    assert dict((name, least) for name, _, _, least in causal.operands) == {
        "q_ref": whole, "k_ref": whole, "v_ref": whole, "o_ref": whole}
    # the work and the traffic halve (528 / 1024 = 0.52)...
    assert causal.mxu_seconds(V5E) / dense.mxu_seconds(V5E) == pytest.approx(528 / 1024)
    assert causal.memory_seconds(V5E) / dense.memory_seconds(V5E) == pytest.approx(0.53, abs=0.01)
    assert causal.mxu_seconds(V5E) == pytest.approx(64 * 528 * pair / 197e12)   # 1.44 ms
    assert causal.memory_seconds(V5E) == pytest.approx(4_689_231_872 / 819e9)   # 5.73 ms
    # ...but at blocks of 128 the 65,536 steps' overhead (22.9 ms) bounds both kernels
    assert causal.overhead_seconds(V5E) == pytest.approx(65_536 * 0.35e-6)
    assert causal.bound(V5E) == (pytest.approx(causal.mxu_seconds(V5E) + 65_536 * 0.35e-6),
                                 "overhead-bound")
    # flash's running statistics m and l, (128, 1) float32 each: 512 B counted by the
    # lessons, a whole column of (8, 128) tiles on the chip
    parts = dict(causal.vmem.parts)
    assert parts["m_scratch"] == parts["l_scratch"] == 128 * 128 * 4 == 64 * KIB
    assert parts["q_ref blocks (2 buffers)"] == 2 * block


def test_a_causal_kernel_fetching_skipped_blocks_shows_the_bytes_it_wastes():
    """The known mistake whose K/V index maps name the skipped blocks: the same flops,
    every K/V block fetched."""
    from pytest_pallas_hints import chapters

    path = Path(__file__).parent / "mistakes" / "flash" / "causal_fetches_skipped_blocks.py"
    chapters.configure("reference", [path])
    try:
        wrong = chapters.chapter("flash")
    finally:
        chapters.configure("exercises")
    q = jax.ShapeDtypeStruct((4, 16, 4096, 128), jnp.float32)
    (c,) = _projected(wrong.flash_causal, q, q, q, block_q=128, block_kv=128)
    block, whole = 128 * 128 * 4, 4 * 16 * 4096 * 128 * 4
    assert c.flops == 64 * 528 * 2 * (2 * 128 ** 3)
    assert c.bytes == 2 * whole + 2 * 64 * 1024 * block
    assert c.bytes - 4_689_231_872 == 2 * 64 * 497 * block   # the skipped pairs' K/V
    assert c.memory_seconds(V5E) == pytest.approx(c.bytes / 819e9)   # 10.8 ms, not 5.7


@pytest.mark.parametrize("block, dtype, kind", [
    (128, jnp.float32, "overhead-bound"),   # 4096 steps: 1.43 ms of overhead
    (256, jnp.float32, "memory-bound"),     # a and b read 8 times: 272 MiB, 348 µs
    (1024, jnp.float32, "memory-bound"),    # 80 MiB, 102 µs > 87 µs of dots
    (2048, jnp.float32, "compute-bound"),   # 48 MiB, 61 µs < 87 µs
    (512, jnp.bfloat16, "compute-bound"),   # 72 MiB in bf16: 92 µs < 87 + 22 µs
])
def test_matmul_moves_from_memory_to_compute_bound_as_its_blocks_grow(block, dtype, kind):
    """M = K = N = 2048 (the block-size puzzle's tpu configuration): a read N / bn times,
    b M / bm times, the output written once; 2 x 2048^3 flops whatever the blocks."""
    matmul = _reference("matmul")
    a = jax.ShapeDtypeStruct((2048, 2048), dtype)
    (c,) = _projected(matmul.matmul, a, a, bm=block, bk=block, bn=block)
    size = np.dtype(dtype).itemsize
    reads = 2048 // block
    assert c.flops == 2 * 2048 ** 3
    assert c.bytes == (2 * reads + 1) * 2048 * 2048 * size
    assert c.steps == reads ** 3
    assert c.mxu_seconds(V5E) == pytest.approx(2 * 2048 ** 3 / 197e12)   # 87.2 µs
    assert c.bound(V5E)[1] == kind


def test_basics_tiled_at_its_tpu_size_is_memory_bound():
    """M=4096 D=512 bm=256: 16 steps, x read and the output written once (8 MiB each)."""
    basics = _reference("basics")
    x = jax.ShapeDtypeStruct((4096, 512), jnp.float32)
    (c,) = _projected(basics.add_one_tiled, x, bm=256)
    assert (c.flops, c.bytes, c.steps) == (0, 16 * MIB, 16)
    assert c.elementwise == 4096 * 512
    assert c.bound(V5E) == (pytest.approx(16 * MIB / 819e9), "memory-bound")   # 20.5 µs
    assert c.vmem.total == 2 * 2 * 256 * 512 * 4


def test_row_softmax_at_its_tpu_size_counts_its_exps():
    """R=4096 C=8192 bf16, 16 rows a block: one exp per element on the EUP."""
    norms = _reference("norms")
    x = jax.ShapeDtypeStruct((4096, 8192), jnp.bfloat16)
    (c,) = _projected(norms.softmax_rows, x, block_rows=16)
    assert c.bytes == 2 * 4096 * 8192 * 2 and c.steps == 256
    assert c.transcendental == 4096 * 8192
    eup = 4096 * 8192 / V5E.transcendental
    assert c.vector_seconds(V5E) > eup
    assert c.bound(V5E) == (pytest.approx(c.bytes / 819e9), "memory-bound")   # 164 µs
    # bf16 blocks of (16, 8192): exactly one sublane-packed tile row, nothing padded
    assert c.vmem.total == 2 * 2 * 16 * 8192 * 2


def _copy(buffers):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def call(x):
        mode = {} if buffers is None else {"pipeline_mode": pl.Buffered(buffers)}
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0), **mode)],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)
    return call


@pytest.mark.parametrize("buffers, count", [(None, 2), (1, 1), (3, 3)])
def test_pl_buffered_sets_the_buffers_counted(buffers, count):
    x = jax.ShapeDtypeStruct((32, 128), jnp.float32)
    (c,) = _projected(_copy(buffers), x)
    parts = dict(c.vmem.parts)
    tile = 8 * 128 * 4
    assert parts[f"x_ref blocks ({count} buffer{'s' if count != 1 else ''})"] == count * tile
    assert parts["o_ref blocks (2 buffers)"] == 2 * tile


@pytest.mark.parametrize("shape, dtype, padded", [
    ((128, 1), "float32", 128 * 128 * 4),   # a statistic: 128 lanes for one
    ((8, 128), "bfloat16", 16 * 128 * 2),   # bf16 packs 16 rows a tile
    ((5, 100), "int8", 32 * 128),           # int8 packs 32
    ((2, 3, 130), "float32", 2 * 8 * 256 * 4),
    ((100,), "float32", 8 * 128 * 4),       # 1-D: one row of tiles
])
def test_vmem_is_padded_to_whole_tiles(shape, dtype, padded):
    assert footprint.padded(shape, jnp.dtype(dtype)) == padded


def test_dots_are_priced_by_dtype_precision_and_the_mxu_tile():
    def dot(*dtypes, precision="default", shape=(1, 128, 128, 128), times=1):
        return cost.KernelCost("k", {}, 0, 0, footprint.Footprint("k", ()),
                               dots=((shape, dtypes, precision, times),))

    bf16 = dot("bfloat16", "bfloat16").mxu_seconds(V5E)
    assert bf16 == pytest.approx(2 * 128 ** 3 / 197e12)
    assert dot("float32", "float32").mxu_seconds(V5E) == pytest.approx(bf16)
    assert dot("float32", "float32", precision="highest").mxu_seconds(V5E) == \
        pytest.approx(6 * bf16)
    assert dot("float32", "float32", precision="high").mxu_seconds(V5E) == pytest.approx(3 * bf16)
    assert dot("int8", "int8").mxu_seconds(V5E) == pytest.approx(bf16 / 2)
    # a 2-row dot pays for 8 rows; on v6e a 128-wide one for 256 x 256
    assert dot("bfloat16", "bfloat16", shape=(1, 2, 128, 128)).mxu_seconds(V5E) == \
        pytest.approx(bf16 * 8 / 128)
    assert dot("bfloat16", "bfloat16").mxu_seconds(V6E) == pytest.approx(2 * 128 * 256 * 256 / 918e12)


def test_a_projected_cost_survives_the_trip_to_the_controller():
    flash = _reference("flash")
    q = jax.ShapeDtypeStruct((1, 2, 512, 128), jnp.float32)
    (c,) = _projected(flash.flash_causal, q, q, q, block_q=128, block_kv=128)
    assert c.projected and c.dots and c.operands
    assert cost.KernelCost.from_dict(c.to_dict()) == c


def test_a_hopper_matmul_is_priced_on_an_h100():
    """hopper.matmul, M=128 K=256 N=128 in float16 tiles of 64: Mosaic GPU kernels are
    priced on the H100 (989 TFLOP/s dense 16-bit on the tensor cores, 3.35 TB/s HBM3),
    with no per-step overhead charged and shared memory as the on-chip budget."""
    from tests.test_chapters import unverifiable

    if unverifiable("hopper"):
        pytest.skip(unverifiable("hopper"))
    hopper = _reference("hopper")
    a, b = np.ones((128, 256), jnp.float16), np.ones((256, 128), jnp.float16)
    from pytest_pallas_hints import runtime

    with runtime.mosaic_gpu(compiled=False):
        (c,) = cost.of(measure(hopper.matmul, a, b, tile_m=64, tile_n=64, tile_k=64,
                               max_concurrent_steps=2, structure=None))
    H100 = cost.CHIPS["h100"]
    assert c.backend == "mosaic_gpu" and cost.chips_for(c.backend) == ("h100",)
    # 16 wgmmas of 64 x 64 x 64: 2 x 2 output tiles, 4 K steps each
    assert c.dots == (((1, 64, 64, 64), ("float16", "float16"), "default", 16),)
    assert c.flops == c.dot_flops["float16"] == 2 * 128 * 256 * 128
    # TMA: a's and b's tiles once per output tile that needs them (each array twice),
    # the output once
    a_bytes, b_bytes, o_bytes = 128 * 256 * 2, 256 * 128 * 2, 128 * 128 * 2
    assert c.operands == (("input 0", "read", 2 * a_bytes, a_bytes),
                          ("input 1", "read", 2 * b_bytes, b_bytes),
                          ("output 0", "written", o_bytes, o_bytes))
    assert c.bytes == 2 * a_bytes + 2 * b_bytes + o_bytes == 294_912
    assert c.mxu_seconds(H100) == pytest.approx(2 * 128 * 256 * 128 / 989e12)   # 8.5 ns
    assert c.memory_seconds(H100) == pytest.approx(294_912 / 3.35e12)             # 88 ns
    assert c.overhead_seconds(H100) == 0
    assert c.bound(H100) == (pytest.approx(294_912 / 3.35e12), "memory-bound")
    # shared memory: 2 pipeline slots of a's and b's (64, 64) f16 tiles, the output tile
    assert c.vmem.total == 2 * 2 * 64 * 64 * 2 + 64 * 64 * 2
