"""Tests for exercises/hopper.py. Run them, don't edit them:

    pytest exercises/test_hopper.py                  # all puzzles of the chapter
    pytest exercises/test_hopper.py -k tma           # one puzzle
    pytest exercises/test_hopper.py -k tma --hint

Your kernels are Mosaic GPU kernels. On a machine without a Hopper GPU they run in
JAX's GPU interpret mode (JAX 0.11 and newer): shared memory, barriers, TMA copies,
the tensor core and several warpgroups are simulated on the CPU, a read of SMEM that
a copy may still be filling is raised as a race (the kit names what is missing, with
your lines), and fresh memory holds NaN. Where this JAX's interpreter cannot run what
a puzzle needs, its tests end as "cannot be verified on JAX X" (skipped, never
passed) and the other chapters are unaffected. Tests marked `gpu` run the same
kernels compiled, at realistic sizes, where a Hopper GPU is present.

Every test compares your kernel with float64 NumPy on at least two shapes (one an
edge case: a single block, a single step, float16 and bfloat16), and checks from the
traced program what the puzzle is about: a plgpu.kernel of yours does the work; the
data moves by TMA where the puzzle says so; a pipeline keeps the number of copies in
flight you asked for; wgmma operands are laid out for the tensor core (the
interpreter multiplies them either way, a Hopper would not).
"""
import math

import numpy as np
import pytest

from pytest_pallas_hints import Structure, chapter, check, check_rejects, f64, measure
from pytest_pallas_hints.lessons.hopper import (
    attention_f64, attention_f64_heads, attention_not_rescaled, check_barriers_waited,
    check_by_tma_only, check_copies_in_bounds, check_k_steps, check_kv_blocks_fetched,
    check_kv_blocks_visited, check_kv_heads_read, check_loads_by_tma, check_pipeline,
    check_products_on_tensor_cores, check_ring_overlaps, check_roles, check_smem_tile,
    check_smem_used, check_wgmma_transforms, check_wgmmas)

hopper = chapter("hopper")

puzzle = pytest.mark.puzzle
on_gpu = pytest.mark.gpu
needs = pytest.mark.mosaic_gpu   # what of GPU interpret mode the puzzle uses

# Every kernel of this chapter: a Mosaic GPU kernel of yours (plgpu.kernel), one
# warpgroup per block unless the puzzle says otherwise, nothing but reshapes around it.
GPU = Structure(backend="mosaic_gpu", threads=1)

# How this chapter's functions check their arguments, for a test that finds them unchecked.
ARGUMENTS = ("Check the arguments first, with the PROVIDED helpers _check_divides and "
             "_check_16_bit.")


def zeros(shape, dtype="float16"):
    return np.zeros(shape, dtype)


# 1 -------------------------------------------------------------------------
@puzzle("hopper.first_kernel")
@needs("kernels")
@pytest.mark.parametrize("M, D, block_rows, dtype", [
    pytest.param(256, 128, 64, "float32", id="M=256 D=128 block_rows=64"),
    pytest.param(64, 64, 64, "float16", id="M=64 D=64 block_rows=64 f16 (one block)"),
    pytest.param(16384, 256, 64, "float32", id="M=16384 D=256-gpu", marks=on_gpu),
])
def test_first_kernel(M, D, block_rows, dtype, rng):
    x = rng.normal((M, D), dtype)
    ran = measure(hopper.add_one, x, block_rows=block_rows,
                  structure=GPU.where(inside={"add", "axis_index"}, grid=(M // block_rows,)))
    check_smem_tile(ran, (block_rows, D), "the block's result")
    check(ran, x + np.asarray(1, dtype), blocks=(block_rows, None), axes="M D",
          likely={"not_added": x})
    check_smem_used(ran, "GMEM -> registers (+ 1) -> the SMEM tile -> "
                         "registers -> GMEM")


@puzzle("hopper.first_kernel")
@needs("kernels")
def test_first_kernel_rejects_bad_arguments():
    check_rejects(hopper.add_one, [
        ("block_rows must divide M", (zeros((256, 128), "float32"),), {"block_rows": 48},
         ["block_rows"]),
        ("block_rows must be positive", (zeros((256, 128), "float32"),), {"block_rows": 0},
         ["block_rows"]),
    ], advice=ARGUMENTS)


# 2 -------------------------------------------------------------------------
# The copies are the lesson; a missing wait or commit_smem shows up as the race (or the
# copy left in flight) that GPU interpret mode reports, named with your lines.
TMA = GPU.where(inside={"copy_gmem_to_smem", "copy_smem_to_gmem", "add"})


@puzzle("hopper.tma")
@needs("tma")
@pytest.mark.parametrize("M, D, block_rows, dtype", [
    pytest.param(256, 128, 64, "float32", id="M=256 D=128 block_rows=64"),
    pytest.param(64, 64, 64, "bfloat16", id="M=64 D=64 block_rows=64 bf16 (one block)"),
    pytest.param(16384, 256, 64, "float32", id="M=16384 D=256-gpu", marks=on_gpu),
])
def test_tma(M, D, block_rows, dtype, rng):
    x = rng.normal((M, D), dtype)
    ran = measure(hopper.add_one_tma, x, block_rows=block_rows,
                  structure=TMA.where(grid=(M // block_rows,)))
    check_copies_in_bounds(ran)
    check_by_tma_only(ran)
    check_smem_tile(ran, (block_rows, D), "the block")
    check(ran, x + np.asarray(1, dtype), blocks=(block_rows, None), axes="M D",
          likely={"not_added": x})


@puzzle("hopper.tma")
@needs("tma")
def test_tma_rejects_bad_arguments():
    check_rejects(hopper.add_one_tma, [
        ("block_rows must divide M", (zeros((256, 128), "float32"),), {"block_rows": 96},
         ["block_rows"])], advice=ARGUMENTS)


# 3 -------------------------------------------------------------------------
@puzzle("hopper.pipeline")
@needs("pipeline")
@pytest.mark.parametrize("L, M, D, block_rows, max_concurrent_steps, dtype", [
    pytest.param(4, 128, 128, 64, 2, "float32", id="L=4 M=128 D=128 steps in flight=2"),
    pytest.param(3, 64, 64, 64, 3, "bfloat16",
                 id="L=3 M=64 D=64 steps in flight=3 bf16 (every copy in flight, one block)"),
    pytest.param(64, 8192, 128, 64, 4, "bfloat16", id="L=64 M=8192 D=128 bf16-gpu",
                 marks=on_gpu),
])
def test_pipeline(L, M, D, block_rows, max_concurrent_steps, dtype, rng):
    x = rng.normal((L, M, D), dtype)
    ran = measure(hopper.sum_stack, x, block_rows=block_rows,
                  max_concurrent_steps=max_concurrent_steps,
                  structure=GPU.where(inside={"emit_pipeline", "add"},
                                      grid=(M // block_rows,)))
    check_copies_in_bounds(ran)
    check_loads_by_tma(ran, "x's slabs through the pipeline's SMEM slots")
    check_pipeline(ran, slots=min(max_concurrent_steps, L), buffers=1,
                   what="x's (block_rows, D) slabs, one per step")
    slabs = x.astype(np.float64)
    check(ran, slabs.sum(0).astype(dtype), blocks=(block_rows, None), axes="M D",
          likely={"first_slab_only": lambda: x[0], "last_slab_only": lambda: x[-1],
                  "one_slab_short": lambda: slabs[:-1].sum(0).astype(dtype),
                  "block_zero_rows": lambda: np.tile(slabs[:, :block_rows].sum(0),
                                                     (M // block_rows, 1)).astype(dtype)})


@puzzle("hopper.pipeline")
@needs("pipeline")
def test_pipeline_rejects_bad_arguments():
    x = zeros((4, 128, 128), "float32")
    check_rejects(hopper.sum_stack, [
        ("block_rows must divide M", (x,), {"block_rows": 96}, ["block_rows"]),
        ("max_concurrent_steps must be at least 1", (x,), {"max_concurrent_steps": 0},
         ["max_concurrent_steps"])], advice=ARGUMENTS)


# 4 -------------------------------------------------------------------------
@puzzle("hopper.wgmma")
@needs("tma", "wgmma")
@pytest.mark.parametrize("M, K, N, dtype", [
    pytest.param(64, 64, 64, "float16", id="M=K=N=64 f16 (128-byte swizzle)"),
    pytest.param(128, 32, 64, "bfloat16", id="M=128 K=32 N=64 bf16 (64-byte swizzle)"),
    pytest.param(128, 128, 128, "bfloat16", id="M=K=N=128 bf16-gpu", marks=on_gpu),
])
def test_wgmma(M, K, N, dtype, rng):
    check_wgmma_transforms(hopper.wgmma_transforms, K, dtype)
    a, b = rng.normal((M, K), dtype), rng.normal((K, N), dtype)
    ran = measure(hopper.matmul_tile, a, b, structure=GPU.where(
        inside={"wgmma_ref", "copy_gmem_to_smem", "barrier_wait", "copy_smem_to_gmem"}))
    check_loads_by_tma(ran, "a and b copied into SMEM tiles, where the wgmma reads them")
    check_products_on_tensor_cores(ran)
    fa, fb = f64(a, b)
    likely = {"a_transposed": lambda: (fa.T @ fb).astype(dtype)} if M == K else {}
    if M == K == N:
        likely["operands_swapped"] = lambda: (fb @ fa).astype(dtype)
    check(ran, (fa @ fb).astype(dtype), likely=likely)


@puzzle("hopper.wgmma")
@needs("tma", "wgmma")
def test_wgmma_rejects_bad_arguments():
    check_rejects(hopper.matmul_tile, [
        ("the tensor core multiplies float16 or bfloat16",
         (zeros((64, 64), "float32"), zeros((64, 64), "float32")), {}, None),
    ], advice=ARGUMENTS)
    check_rejects(hopper.wgmma_transforms, [
        ("no swizzle of 128, 64 or 32 bytes divides a row of 8 bytes", (), {
            "cols": 4, "dtype": np.float16}, None),
    ], advice=ARGUMENTS)


# 5 -------------------------------------------------------------------------
@puzzle("hopper.matmul")
@needs("pipeline", "wgmma")
@pytest.mark.parametrize("M, K, N, tiles, max_concurrent_steps, dtype", [
    pytest.param(128, 256, 128, (64, 64, 64), 2, "float16",
                 id="M=128 K=256 N=128 tiles=64 f16 (4 K steps, 2 in flight)"),
    pytest.param(64, 64, 192, (64, 64, 32), 3, "bfloat16",
                 id="M=64 K=64 N=192 tile_k=32 bf16 (one M tile, 2 K steps, 3 asked)"),
    pytest.param(2048, 2048, 2048, (128, 128, 64), 4, "bfloat16",
                 id="M=K=N=2048 bf16-gpu", marks=on_gpu),
])
def test_matmul(M, K, N, tiles, max_concurrent_steps, dtype, rng):
    tile_m, tile_n, tile_k = tiles
    a, b = rng.normal((M, K), dtype), rng.normal((K, N), dtype)
    ran = measure(hopper.matmul, a, b, tile_m=tile_m, tile_n=tile_n, tile_k=tile_k,
                  max_concurrent_steps=max_concurrent_steps,
                  structure=GPU.where(inside={"wgmma_ref", "emit_pipeline"},
                                      grid=(M // tile_m, N // tile_n)))
    check_copies_in_bounds(ran)
    check_loads_by_tma(ran, "a's and b's tiles through the pipeline's SMEM slots")
    check_k_steps(ran, K=K, tile_k=tile_k)
    check_products_on_tensor_cores(ran)
    check_pipeline(ran, slots=min(max_concurrent_steps, K // tile_k), buffers=2,
                   what="a's (tile_m, tile_k) tiles and b's (tile_k, tile_n) tiles")
    fa, fb = f64(a, b)

    def k_steps_but_last():
        return (fa[:, :K - tile_k] @ fb[:K - tile_k]).astype(dtype)

    check(ran, (fa @ fb).astype(dtype), blocks=(tile_m, tile_n), axes="M N",
          likely={"last_k_step_missing": k_steps_but_last,
                  "first_k_step_only": lambda: (fa[:, :tile_k] @ fb[:tile_k]).astype(dtype)})


@puzzle("hopper.matmul")
@needs("pipeline", "wgmma")
def test_matmul_rejects_bad_arguments():
    a, b = zeros((128, 128)), zeros((128, 128))
    check_rejects(hopper.matmul, [
        ("tile_m must divide M", (a, b), {"tile_m": 96}, ["tile_m"]),
        ("tile_n must divide N", (a, b), {"tile_n": 96}, ["tile_n"]),
        ("tile_k must divide K", (a, b), {"tile_k": 96}, ["tile_k"]),
        ("a and b must agree in K", (a, zeros((64, 128))), {}, ["K"]),
        ("the tensor core multiplies float16 or bfloat16",
         (zeros((128, 128), "float32"), zeros((128, 128), "float32")), {}, None),
        ("max_concurrent_steps must be at least 1", (a, b), {"max_concurrent_steps": 0},
         ["max_concurrent_steps"]),
    ], advice=ARGUMENTS)


# 6 -------------------------------------------------------------------------
@puzzle("hopper.warpgroups")
@needs("warpgroups", "tma")
@pytest.mark.parametrize("S, D, block_rows, dtype", [
    pytest.param(256, 128, 64, "float32", id="S=256 D=128 block_rows=64 (4 tiles, 2 slots)"),
    pytest.param(192, 64, 64, "float16",
                 id="S=192 D=64 block_rows=64 f16 (3 tiles: a slot reused once)"),
    pytest.param(65536, 128, 64, "float32", id="S=65536 D=128-gpu", marks=on_gpu),
])
def test_warpgroups(S, D, block_rows, dtype, rng):
    x = rng.normal((S, D), dtype)
    ran = measure(hopper.add_one_specialized, x, block_rows=block_rows,
                  structure=GPU.where(threads=2, inside={
                      "axis_index", "copy_gmem_to_smem", "barrier_wait", "barrier_arrive",
                      "add"}))
    check_copies_in_bounds(ran)
    check_smem_tile(ran, (2, block_rows, D), "the two slots of the ring")
    check_loads_by_tma(ran, "x's tiles copied into the ring's slots by the producer")
    check_roles(ran)
    check(ran, x + np.asarray(1, dtype), blocks=(block_rows, None), axes="S D",
          likely={"not_added": x})
    check_barriers_waited(ran)
    check_ring_overlaps(ran, tiles=S // block_rows)


@puzzle("hopper.warpgroups")
@needs("warpgroups", "tma")
def test_warpgroups_rejects_bad_arguments():
    check_rejects(hopper.add_one_specialized, [
        ("block_rows must divide S", (zeros((256, 128), "float32"),), {"block_rows": 96},
         ["block_rows"])], advice=ARGUMENTS)


# 7 -------------------------------------------------------------------------
@puzzle("hopper.attention")
@needs("pipeline", "wgmma")
@pytest.mark.parametrize("B, N, K, T, S, H, causal, block_q, block_kv, dtype, rising", [
    pytest.param(1, 4, 2, 64, 128, 64, False, 64, 64, "float16", False,
                 id="B=1 N=4 K=2 T=64 S=128 H=64 f16 (grouped heads)"),
    pytest.param(2, 1, 1, 128, 128, 64, True, 64, 64, "bfloat16", False,
                 id="B=2 N=K=1 T=S=128 H=64 causal bf16"),
    pytest.param(1, 2, 1, 256, 256, 64, True, 128, 64, "float16", False,
                 id="B=1 N=2 K=1 T=S=256 causal block_q=128 block_kv=64 f16"),
    pytest.param(1, 1, 1, 64, 192, 128, False, 64, 64, "float16", True,
                 id="T=64 S=192 H=128 f16, the last KV block's scores over 100 higher"),
    pytest.param(2, 16, 4, 2048, 2048, 128, True, 64, 64, "bfloat16", False,
                 id="B=2 N=16 K=4 T=S=2048-gpu", marks=on_gpu),
])
def test_attention(B, N, K, T, S, H, causal, block_q, block_kv, dtype, rising, rng):
    """``rising``: a later KV block's scores exceed the first block's by more than exp's
    float32 range (88): the running max must move, and what was summed be rescaled."""
    q = rng.normal((B, N, T, H), dtype)
    k, v = rng.normal((B, K, S, H), dtype), rng.normal((B, K, S, H), dtype)
    if rising:   # q . k / sqrt(H) = 2 x 5 x sqrt(128) = 113 on the last KV block
        q = np.full_like(q, 2)
        k[..., S - block_kv:, :] = 5
    ran = measure(hopper.attention, q, k, v, causal=causal, block_q=block_q,
                  block_kv=block_kv,
                  structure=GPU.where(inside={"wgmma_ref", "emit_pipeline", "exp"},
                                      grid=(B, N, T // block_q)))
    check_wgmmas(ran, at_least=2, why=(
        "both products run on the tensor core, q @ k.T for the scores and p @ v for the "
        "output (p stored to an SMEM tile first)."))
    check_products_on_tensor_cores(ran)
    check_kv_blocks_visited(ran, T=T, S=S, block_q=block_q, block_kv=block_kv,
                            causal=causal)
    check_loads_by_tma(ran, "q, k and v tiles copied into SMEM, where the wgmmas read them")
    check_kv_blocks_fetched(ran, S=S, block_q=block_q, block_kv=block_kv, causal=causal)
    check_kv_heads_read(ran, q, k, v, causal)
    check_copies_in_bounds(ran)
    likely = {"unscaled": lambda: attention_f64(q * math.sqrt(H), k, v, causal).astype(dtype),
              "scaled_by_1_over_H": lambda: attention_f64(q / math.sqrt(H), k, v,
                                                          causal).astype(dtype),
              "not_causal": lambda: attention_f64(q, k, v, not causal).astype(dtype),
              "not_normalised": lambda: attention_f64(q, k, v, causal,
                                                      normalised=False).astype(dtype),
              "acc_not_rescaled": lambda: attention_not_rescaled(q, k, v, causal, block_kv)
              .astype(dtype)}
    if K not in (1, N):
        likely["kv_head_mod"] = lambda: attention_f64_heads(
            q, k, v, causal, lambda n: n % K).astype(dtype)
    check(ran, attention_f64(q, k, v, causal).astype(dtype),
          blocks=(None, 1, block_q, None), axes="B N T H", likely=likely)


@puzzle("hopper.attention")
@needs("pipeline", "wgmma")
def test_attention_rejects_bad_arguments():
    q = zeros((1, 2, 128, 64))
    check_rejects(hopper.attention, [
        ("block_q must be a multiple of 64", (q, q, q), {"block_q": 32}, ["block_q"]),
        ("block_kv must be a multiple of 64", (q, q, q), {"block_kv": 96}, ["block_kv"]),
        ("block_q must divide T", (zeros((1, 2, 192, 64)), q, q), {"block_q": 128},
         ["block_q"]),
        ("K must divide N", (zeros((1, 3, 128, 64)), q, q), {}, ["K", "N"]),
        ("the tensor core multiplies float16 or bfloat16",
         (zeros((1, 2, 128, 64), "float32"),) * 3, {}, None),
    ], advice=ARGUMENTS)
