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
import ast
import functools
import math
import re
from pathlib import Path

import jax
import numpy as np
import pytest

from pytest_pallas_hints import Structure, chapter, check, fail, measure
from pytest_pallas_hints import gpu_steps, jaxcompat
from pytest_pallas_hints.checking import line_of

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


def check_smem_used(ran, what):
    """The data passes through the kernel's own SMEM: a store into one of its SMEM
    buffers and a load from it."""
    stores, loads = set(), set()

    def walk(jaxpr, owned):
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name in ("swap", "get") and eqn.invars[0] in owned:
                (stores if name == "swap" else loads).add(owned[eqn.invars[0]])
            if name == "run_scoped":
                inner, _ = jaxcompat.open_jaxpr(eqn.params["jaxpr"])
                mine = {v: id(v) for v in inner.invars
                        if jaxcompat.memory_space(v.aval) == "smem"
                        and "barrier" not in str(v.aval.dtype)}
                walk(inner, {**{c: owned[o] for c, o in zip(inner.constvars, eqn.invars)
                                if o in owned}, **mine})
                continue
            for inner, _ in jaxcompat.sub_jaxprs(eqn):
                walk(inner, {})

    walk(kernel_of(ran).kernel, {})
    if not stores & loads:
        fail("smem_unused", (
            f"your kernel allocates an SMEM tile but the data never passes through it, where "
            f"this puzzle has it go {what}. Store the block's result into the tile (tile[...] = ...) and load it "
            "from there (tile[...]) for the store into o_ref."),
            [("smem", f"stored into: {'yes' if stores else 'no'} · loaded from: "
                      f"{'yes' if loads else 'no'}")])


def kernel_parameters(ran) -> list[str]:
    """The names of your kernel function's parameters, in order (its refs): of the
    innermost function around the kernel's first traced line."""
    call = kernel_of(ran)
    try:
        tree = ast.parse(Path(call.source).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, TypeError):
        return []
    around = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
              and node.lineno <= call.line <= node.end_lineno]   # its first traced line
    if not around:
        return []
    inner = min(around, key=lambda node: node.end_lineno - node.lineno)
    return [a.arg for a in inner.args.posonlyargs + inner.args.args]


def check_copies_in_bounds(ran):
    """Every TMA copy's GMEM window lies inside its ref and inside the .at[...] view it
    is cut from, in every block (found on the kernel's integers, before it ran). A
    Hopper reads zeros past the end of a ref and drops what a copy out writes there:
    in this chapter's shapes, which the blocks divide, that is always a wrong index."""
    found = gpu_steps.run(kernel_of(ran))
    if found is None or not found.outside:
        return
    first = found.outside[0]
    block = ", ".join(f"{axis}={index}" for axis, index in first.block.items())
    names = kernel_parameters(ran)
    ref = names[first.operand] if first.operand is not None and first.operand < len(names) \
        else "the GMEM ref"
    reading = first.copy.primitive.name == "copy_gmem_to_smem"
    fail("tma_outside", (
        f"a TMA copy {'reads' if reading else 'writes'} past the end of its GMEM ref (or "
        "of the .at[...] view it is cut from): a Hopper "
        f"{'reads zeros there' if reading else 'drops what lands there'}, GPU interpret "
        "mode whatever lies beyond. Check the index map or the .at[...] offsets of the "
        "copy under 'copy': each block's window is its block index times the block size, "
        "along the axis the index is for."), [
        ("copy", line_of(first.copy)),
        ("window", f"{ref}: {first.where}" + (f" (block {block})" if block else ""))])


def check_rejects(function, cases):
    """Each case (why, args, static, names) must raise a ValueError naming one of
    ``names`` (the argument at fault; None: any ValueError), before any kernel runs."""
    name = function.__name__
    for why, args, static, names in cases:
        shown = ", ".join([*(f"{a.shape} {a.dtype}" for a in args),
                           *(f"{k}={v!r}" for k, v in static.items())])
        wanted = f"a ValueError naming {' or '.join(names)}" if names else "a ValueError"
        try:
            jax.eval_shape(functools.partial(function, **static), *args)
        except ValueError as error:
            if names is None or any(re.search(rf"\b{n}\b", str(error)) for n in names):
                continue
            fail("bad_arguments", (
                f"{name}({shown}) raised a ValueError that does not name "
                f"{' or '.join(names)}: say in the message which argument is wrong "
                f"({why})."), [("raised", str(error).splitlines()[0][:200])])
        except NotImplementedError:
            raise
        except Exception as error:
            fail("bad_arguments", (
                f"{name}({shown}) should raise {wanted} before any kernel is built "
                f"({why}); it failed later, with another error. Check the arguments "
                "first, with the PROVIDED helpers _check_divides and _check_16_bit."),
                [("raised", f"{type(error).__name__}: {str(error).splitlines()[0][:200]}")])
        else:
            fail("bad_arguments", (
                f"{name}({shown}) should raise {wanted} ({why}); it raised nothing. "
                "Check the arguments first, with the PROVIDED helpers _check_divides and "
                "_check_16_bit."), [("call", f"{name}({shown})")])


def zeros(shape, dtype="float16"):
    return np.zeros(shape, dtype)


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
    ])


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
         ["block_rows"])])


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
         ["max_concurrent_steps"])])


# 4 -------------------------------------------------------------------------
def check_wgmma_transforms(cols, dtype):
    """wgmma_transforms(cols, dtype): the widest swizzle (128, 64, 32 bytes) dividing a
    row in bytes, and a tiling of 8 rows by that swizzle counted in elements."""
    itemsize = np.dtype(dtype).itemsize
    row_bytes = cols * itemsize
    widest = next(s for s in (128, 64, 32) if row_bytes % s == 0)
    transforms = hopper.wgmma_transforms(cols, dtype)
    swizzle = next((int(t.swizzle) for t in transforms if hasattr(t, "swizzle")), None)
    tiling = next((tuple(t.tiling) for t in transforms if hasattr(t, "tiling")), None)
    call = f"wgmma_transforms({cols}, {dtype})"
    if swizzle != widest:
        fail("swizzle_not_widest", (
            f"{call} picks a {swizzle}-byte swizzle where {widest} bytes divide a row of "
            f"{row_bytes} bytes: take the widest that fits (try 128, then 64, then 32). A "
            "wider swizzle spreads the 128 lanes' reads of a tile over more SMEM banks."),
            [("swizzle", f"yours {swizzle} · the widest that divides {row_bytes}: {widest}")])
    if tiling != (8, swizzle // itemsize):
        fail("tiling_in_bytes", (
            f"{call} tiles by {tiling}: the TilingTransform counts elements, not bytes. A "
            f"{swizzle}-byte swizzle of {dtype} ({itemsize} bytes each) is "
            f"{swizzle // itemsize} elements wide: TilingTransform((8, swizzle // "
            "itemsize))."),
            [("tiling", f"yours {tiling} · expected (8, {swizzle // itemsize})")])

@puzzle("hopper.wgmma")
@needs("tma", "wgmma")
@pytest.mark.parametrize("M, K, N, dtype", [
    pytest.param(64, 64, 64, "float16", id="M=K=N=64 f16 (128-byte swizzle)"),
    pytest.param(128, 32, 64, "bfloat16", id="M=128 K=32 N=64 bf16 (64-byte swizzle)"),
    pytest.param(128, 128, 128, "bfloat16", id="M=K=N=128 bf16-gpu", marks=on_gpu),
])
def test_wgmma(M, K, N, dtype, rng):
    check_wgmma_transforms(K, dtype)
    a, b = rng.normal((M, K), dtype), rng.normal((K, N), dtype)
    ran = measure(hopper.matmul_tile, a, b, structure=GPU.where(
        inside={"wgmma_ref", "copy_gmem_to_smem", "barrier_wait", "copy_smem_to_gmem"}))
    fa, fb = f64(a, b)
    likely = {"a_transposed": lambda: (fa.T @ fb).astype(dtype)} if M == K else {}
    check(ran, (fa @ fb).astype(dtype), likely=likely)


@puzzle("hopper.wgmma")
@needs("tma", "wgmma")
def test_wgmma_rejects_bad_arguments():
    check_rejects(hopper.matmul_tile, [
        ("the tensor core multiplies float16 or bfloat16",
         (zeros((64, 64), "float32"), zeros((64, 64), "float32")), {}, None)])
    check_rejects(hopper.wgmma_transforms, [
        ("no swizzle of 128, 64 or 32 bytes divides a row of 8 bytes", (), {
            "cols": 4, "dtype": np.float16}, None)])


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
    found = gpu_steps.run(kernel_of(ran))   # one wgmma per K step, in every block
    steps = sorted(set(found.wgmmas.values())) if found is not None else []
    if steps and steps != [K // tile_k]:
        fail("k_steps", (
            f"your pipeline runs {' or '.join(map(str, steps))} step(s) per block (one wgmma "
            f"each), where K // tile_k = {K} // {tile_k} = {K // tile_k}: its grid is "
            "(K // tile_k,), one step per K tile."),
            [("k steps", f"yours {' or '.join(map(str, steps))} · K // tile_k = "
                         f"{K // tile_k}")])
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
    ])


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
    check(ran, x + np.asarray(1, dtype), blocks=(block_rows, None), axes="S D",
          likely={"not_added": x})
    found = gpu_steps.run(kernel_of(ran))
    if found is not None and found.unwaited:
        extra = found.unwaited[0]
        fail("barrier_unwaited", (
            "a barrier ends the kernel with completions nobody waited for: your "
            "plgpu.barrier_arrive (under 'arrives') completes it more often than the other "
            "warpgroup waits on it. On a Hopper a barrier must not be freed with an "
            "arrival pending; GPU interpret mode does not count them. Arrive only when a "
            "wait will take it: the consumer releases a slot only if a later tile reuses "
            "it (i + 2 < steps)."),
            [("arrives", line_of(extra.arrive)),
             ("", f"barrier[{', '.join(map(str, extra.index))}] completes "
                  f"{extra.completions} times, waited {extra.waits}")])


@puzzle("hopper.warpgroups")
@needs("warpgroups", "tma")
def test_warpgroups_rejects_bad_arguments():
    check_rejects(hopper.add_one_specialized, [
        ("block_rows must divide S", (zeros((256, 128), "float32"),), {"block_rows": 96},
         ["block_rows"])])


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


def attention_f64_heads(q, k, v, causal, kv_head):
    """attention_f64 with query head n reading K/V head kv_head(n)."""
    N = q.shape[1]
    heads = [kv_head(n) for n in range(N)]
    return attention_f64(q, k[:, heads], v[:, heads], causal)


def check_kv_heads_read(ran, q, k, v, causal):
    """Where query heads share K/V heads, which K/V head each query head read: the one
    whose attention its output equals. Fails, naming them, where a head read another
    head's K/V than n // (N // K)."""
    N, K = q.shape[1], k.shape[1]
    if K in (1, N) or q.size * k.shape[2] > 2 ** 24:   # the GPU config: values only
        return
    yours = np.asarray(ran.output, np.float64)
    if yours.shape != q.shape:
        return   # the shape check says so

    def read(n):
        for j in range(K):
            one = attention_f64(q[:, n:n + 1], k[:, j:j + 1], v[:, j:j + 1], causal)
            if np.allclose(yours[:, n:n + 1], one.astype(q.dtype), atol=2e-2, rtol=2e-2):
                return j
        return None

    heads = [read(n) for n in range(N)]
    group = N // K
    if all(j == n // group for n, j in enumerate(heads)) or \
            all(j is None for n, j in enumerate(heads) if j != n // group):
        return   # right, or wrong in a way no K/V head explains: check() says what
    shown = ", ".join(f"{n}->{'?' if j is None else j}" for n, j in enumerate(heads))
    wanted = ", ".join(f"{n}->{n // group}" for n in range(N))
    wrong = [n for n, j in enumerate(heads) if j is not None and j != n // group]
    fail("kv_head_mod" if all(j == n % K for n, j in enumerate(heads)) else "kv_head", (
        f"query head{'s' if len(wrong) > 1 else ''} {', '.join(map(str, wrong))} read the "
        f"K/V of another head group: the N // K = {group} query heads that share a K/V "
        "head are consecutive, so head n reads K/V head n // (N // K), in the index maps "
        "of k and v (and of any copy of them)."), [
        ("heads read", f"query head -> K/V head: yours {shown} · expected {wanted}"
                       + (" ('?': no K/V head's values; read past the K heads?)"
                          if None in heads else ""))])


def attention_not_rescaled(q, k, v, causal, block_kv):
    """The online softmax with acc never rescaled by alpha: acc sums each KV block's
    p @ v against the running max of its own step, l is rescaled."""
    q, k, v = f64(q, k, v)
    N, K, S = q.shape[1], k.shape[1], k.shape[2]
    k, v = np.repeat(k, N // K, axis=1), np.repeat(v, N // K, axis=1)
    s = np.einsum("bnth,bnsh->bnts", q, k) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    m = np.full(s.shape[:-1], -np.inf)
    l, acc = np.zeros(s.shape[:-1]), np.zeros(q.shape)
    for j in range(0, S, block_kv):
        block = s[..., j:j + block_kv]
        m_new = np.maximum(m, block.max(-1))
        keep = np.isfinite(m_new)
        if not keep.any():
            continue
        p = np.exp(block - np.where(keep, m_new, 0)[..., None])
        p = np.where(np.isfinite(block), p, 0)
        l = l * np.exp(np.where(np.isfinite(m), m - m_new, -np.inf)) + p.sum(-1)
        acc = acc + np.einsum("bnts,bnsh->bnth", p, v[:, :, j:j + block_kv])
        m = m_new
    return acc / l[..., None]


def check_kv_blocks_visited(ran, *, T, S, block_q, block_kv, causal):
    """Each block (b, n, qi) issues two wgmmas per KV block it visits; with causal, it
    visits only the KV blocks holding a key at or before its last query."""
    found = gpu_steps.run(kernel_of(ran))
    if found is None:
        return
    for block, wgmmas in sorted(found.wgmmas.items()):
        qi = block[-1]
        last_query = (qi + 1) * block_q - 1
        needed = min(S // block_kv, -(-(last_query + 1) // block_kv)) if causal \
            else S // block_kv
        if wgmmas != 2 * needed:
            visited = wgmmas / 2
            shown = f"{visited:g}" if visited == int(visited) else f"{wgmmas} wgmmas for"
            hold = "holds" if needed == 1 else "hold"
            if wgmmas > 2 * needed:
                says = (f"q block {qi} visits {shown} KV blocks where {needed} {hold} a key "
                        f"at or before its last query ({last_query}): the blocks past the "
                        "diagonal are all masked and only cost time, half the work of "
                        "causal attention. Give emit_pipeline a grid of the blocks that "
                        f"count, min(S // block_kv, cdiv((qi + 1) * block_q, block_kv)) "
                        "(a traced number of steps is fine).")
            else:
                says = (f"q block {qi} visits {shown} KV blocks where {needed} {hold} a key "
                        f"at or before its last query ({last_query}): keys it must see are "
                        "never visited. Count KV blocks, not q blocks: cdiv((qi + 1) * "
                        "block_q, block_kv) blocks of block_kv keys (block_q and block_kv "
                        "differ here).")
            fail("kv_steps", says, [
                ("kv steps", f"q block {qi}: yours {shown} · needed {needed} "
                             f"(block_q={block_q}, block_kv={block_kv}, causal={causal})")])


@puzzle("hopper.attention")
@needs("pipeline", "wgmma")
@pytest.mark.parametrize("B, N, K, T, S, H, causal, block_q, block_kv, dtype", [
    pytest.param(1, 4, 2, 64, 128, 64, False, 64, 64, "float16",
                 id="B=1 N=4 K=2 T=64 S=128 H=64 f16 (grouped heads)"),
    pytest.param(2, 1, 1, 128, 128, 64, True, 64, 64, "bfloat16",
                 id="B=2 N=K=1 T=S=128 H=64 causal bf16"),
    pytest.param(1, 2, 1, 256, 256, 64, True, 128, 64, "float16",
                 id="B=1 N=2 K=1 T=S=256 causal block_q=128 block_kv=64 f16"),
    pytest.param(2, 16, 4, 2048, 2048, 128, True, 64, 64, "bfloat16",
                 id="B=2 N=16 K=4 T=S=2048-gpu", marks=on_gpu),
])
def test_attention(B, N, K, T, S, H, causal, block_q, block_kv, dtype, rng):
    q = rng.normal((B, N, T, H), dtype)
    k, v = rng.normal((B, K, S, H), dtype), rng.normal((B, K, S, H), dtype)
    ran = measure(hopper.attention, q, k, v, causal=causal, block_q=block_q,
                  block_kv=block_kv,
                  structure=GPU.where(inside={"wgmma_ref", "emit_pipeline", "exp"},
                                      grid=(B, N, T // block_q)))
    check_wgmmas(ran, at_least=2, why=(
        "both products run on the tensor core, q @ k.T for the scores and p @ v for the "
        "output (p stored to an SMEM tile first)."))
    check_kv_blocks_visited(ran, T=T, S=S, block_q=block_q, block_kv=block_kv,
                            causal=causal)
    check_kv_heads_read(ran, q, k, v, causal)
    check_copies_in_bounds(ran)
    likely = {"unscaled": lambda: attention_f64(q * math.sqrt(H), k, v, causal).astype(dtype),
              "not_causal": lambda: attention_f64(q, k, v, not causal).astype(dtype),
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
    ])
