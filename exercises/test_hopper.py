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

from pytest_pallas_hints import Structure, chapter, check, fail, measure
from pytest_pallas_hints import jaxcompat
from pytest_pallas_hints.checking import line_of
from pytest_pallas_hints.structure import primitives

hopper = chapter("hopper")

puzzle = pytest.mark.puzzle
on_gpu = pytest.mark.gpu
needs = pytest.mark.mosaic_gpu   # what of GPU interpret mode the puzzle uses

# Every kernel of this chapter: a Mosaic GPU kernel of yours (plgpu.kernel), one
# warpgroup per block unless the puzzle says otherwise, nothing but reshapes around it.
GPU = Structure(backend="mosaic_gpu", threads=1)


def f64(*arrays):
    return [np.asarray(a, np.float64) for a in arrays]


def kernel_of(ran):
    return ran.program.sites[0].call


# --- what your kernels allocate and touch ---------------------------------------

def check_smem_tile(ran, shape, what):
    """The kernel allocates an SMEM buffer of ``shape`` of its own (scratch_types)."""
    found = jaxcompat.smem_allocations(kernel_of(ran).kernel)
    if not any(tuple(s)[-len(shape):] == tuple(shape) or
               int(np.prod(s)) == int(np.prod(shape)) for s in found):
        fail("no_smem", (
            f"your kernel has no SMEM tile of shape {shape} for {what}: this puzzle's data "
            "passes through shared memory. Allocate it with plgpu.SMEM(shape, dtype) in "
            "scratch_types (the kernel gets it after its outputs)."),
            [("smem", f"yours: {found or 'none'}")])


def check_by_tma_only(ran):
    """The kernel never loads from or stores to a GMEM ref itself: the data moves by TMA."""
    direct = jaxcompat.gmem_accesses(kernel_of(ran).kernel)
    if direct:
        fail("gmem_access", (
            "your kernel reads or writes a GMEM ref with [...] itself: in this puzzle the "
            "data travels by TMA only, plgpu.copy_gmem_to_smem into an SMEM tile and "
            "plgpu.copy_smem_to_gmem back. Index GMEM refs only with .at[...] to name "
            "what a copy moves."), [("at", line_of(direct[0]))])


def check_pipeline(ran, *, slots, buffers, what):
    """plgpu.emit_pipeline allocated ``buffers`` SMEM buffers of ``slots`` slots each."""
    found = jaxcompat.pipeline_buffers(kernel_of(ran).kernel)
    if len(found) != buffers or any(shape[0] != slots for shape in found):
        fail("pipeline_slots", (
            f"your pipeline keeps {sorted({s[0] for s in found}) or 'no'} slot(s) per "
            f"operand, where the puzzle asks for {slots}: plgpu.emit_pipeline allocates "
            "max_concurrent_steps slots for each BlockSpec and keeps that many copies in "
            f"flight. Pass max_concurrent_steps through (at most the number of steps), "
            f"with one BlockSpec per operand it streams ({what})."),
            [("pipeline", f"yours {len(found)} buffer(s) of {[s[0] for s in found]} slots · "
                          f"the puzzle's {buffers} of {slots}")])


def check_wgmmas(ran, *, at_least, why):
    found = jaxcompat.wgmma_operands(kernel_of(ran).kernel)
    if len(found) < at_least:
        fail("wgmma_count", f"your kernel makes {len(found)} plgpu.wgmma call(s): {why}",
             [("wgmma", f"yours {len(found)} · the puzzle's {at_least}")])


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
    check_by_tma_only(ran)
    check_smem_tile(ran, (block_rows, D), "the block")
    check(ran, x + np.asarray(1, dtype), blocks=(block_rows, None), axes="M D",
          likely={"not_added": x})


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
    check_pipeline(ran, slots=min(max_concurrent_steps, L), buffers=1,
                   what="x's (block_rows, D) slabs, one per step")
    slabs = x.astype(np.float64)
    check(ran, slabs.sum(0).astype(dtype), blocks=(block_rows, None), axes="M D",
          likely={"first_slab_only": lambda: x[0], "last_slab_only": lambda: x[-1],
                  "one_slab_short": lambda: slabs[:-1].sum(0).astype(dtype)})


# 4 -------------------------------------------------------------------------
@puzzle("hopper.wgmma")
@needs("tma", "wgmma")
@pytest.mark.parametrize("M, K, N, dtype", [
    pytest.param(64, 64, 64, "float16", id="M=K=N=64 f16 (128-byte swizzle)"),
    pytest.param(128, 32, 64, "bfloat16", id="M=128 K=32 N=64 bf16 (64-byte swizzle)"),
    pytest.param(128, 128, 128, "bfloat16", id="M=K=N=128 bf16-gpu", marks=on_gpu),
])
def test_wgmma(M, K, N, dtype, rng):
    a, b = rng.normal((M, K), dtype), rng.normal((K, N), dtype)
    ran = measure(hopper.matmul_tile, a, b, structure=GPU.where(
        inside={"wgmma_ref", "copy_gmem_to_smem", "barrier_wait", "copy_smem_to_gmem"}))
    fa, fb = f64(a, b)
    likely = {"a_transposed": lambda: (fa.T @ fb).astype(dtype)} if M == K else {}
    check(ran, (fa @ fb).astype(dtype), likely=likely)


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
    check_pipeline(ran, slots=min(max_concurrent_steps, K // tile_k), buffers=2,
                   what="a's (tile_m, tile_k) tiles and b's (tile_k, tile_n) tiles")
    fa, fb = f64(a, b)

    def k_steps_but_last():
        return (fa[:, :K - tile_k] @ fb[:K - tile_k]).astype(dtype)

    check(ran, (fa @ fb).astype(dtype), blocks=(tile_m, tile_n), axes="M N",
          likely={"last_k_step_missing": k_steps_but_last,
                  "first_k_step_only": lambda: (fa[:, :tile_k] @ fb[:tile_k]).astype(dtype)})
    if "wgmma_wait" not in primitives(kernel_of(ran)):
        fail("wgmma_wait", (
            "your pipeline body issues a wgmma and returns without plgpu.wgmma_wait: the "
            "wgmma runs on asynchronously, still reading the SMEM slots, while the pipeline "
            "refills them with the next tiles. GPU interpret mode finishes every wgmma at "
            "once and cannot see it; a Hopper would multiply tiles half overwritten. End "
            "the body with plgpu.wgmma_wait(0)."))


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
    check_smem_tile(ran, (2, block_rows, D), "the two slots of the ring")
    check(ran, x + np.asarray(1, dtype), blocks=(block_rows, None), axes="S D",
          likely={"not_added": x})


# 7 -------------------------------------------------------------------------
def attention_f64(q, k, v, causal):
    """Softmax attention in float64: q [B, N, T, H], k and v [B, K, S, H] shared by
    N // K query heads each; causal: query t sees keys 0..t."""
    q, k, v = f64(q, k, v)
    N, K = q.shape[1], k.shape[1]
    k, v = np.repeat(k, N // K, axis=1), np.repeat(v, N // K, axis=1)
    s = np.einsum("bnth,bnsh->bnts", q, k) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bnts,bnsh->bnth", p / p.sum(-1, keepdims=True), v)


@puzzle("hopper.attention")
@needs("pipeline", "wgmma")
@pytest.mark.parametrize("B, N, K, T, S, H, causal, dtype", [
    pytest.param(1, 4, 2, 64, 128, 64, False, "float16",
                 id="B=1 N=4 K=2 T=64 S=128 H=64 f16 (grouped heads)"),
    pytest.param(2, 1, 1, 128, 128, 64, True, "bfloat16",
                 id="B=2 N=K=1 T=S=128 H=64 causal bf16"),
    pytest.param(2, 16, 4, 2048, 2048, 128, True, "bfloat16", id="B=2 N=16 K=4 T=S=2048-gpu",
                 marks=on_gpu),
])
def test_attention(B, N, K, T, S, H, causal, dtype, rng):
    q = rng.normal((B, N, T, H), dtype)
    k, v = rng.normal((B, K, S, H), dtype), rng.normal((B, K, S, H), dtype)
    ran = measure(hopper.attention, q, k, v, causal=causal, block_q=64, block_kv=64,
                  structure=GPU.where(inside={"wgmma_ref", "emit_pipeline", "exp"},
                                      grid=(B, N, T // 64)))
    check_wgmmas(ran, at_least=2, why=(
        "both products run on the tensor core, q @ k.T for the scores and p @ v for the "
        "output (p stored to an SMEM tile first)."))
    check(ran, attention_f64(q, k, v, causal).astype(dtype), blocks=(None, None, 64, None),
          axes="B N T H",
          likely={"unscaled": lambda: attention_f64(q * math.sqrt(H), k, v, causal)
                  .astype(dtype),
                  "not_causal": lambda: attention_f64(q, k, v, not causal).astype(dtype)})
