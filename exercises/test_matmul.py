"""Tests for exercises/matmul.py. Run them, don't edit them:

    pytest exercises/test_matmul.py                    # all puzzles of the chapter
    pytest exercises/test_matmul.py -k k_accumulate    # one puzzle
    pytest exercises/test_matmul.py -k k_accumulate --hint

Each test compares your kernel with NumPy on at least two shapes (one an edge
case), then checks that it would compile for a real TPU. Tests marked `tpu`
run bigger shapes on a real TPU and are skipped elsewhere.

Most inputs are small integers stored as floats. Every sum of their products
is then exact in float32, so a right kernel matches NumPy to the last bit on
any hardware, and a kernel that rounds too early cannot hide behind a
tolerance.
"""
import numpy as np
import pytest

from pytest_pallas_hints import (Structure, cdiv, chapter, check, check_products_on_the_mxu,
                                 check_traffic, check_work, lowers_for_tpu, measure,
                                 tpu_sized)
from pytest_pallas_hints.lessons.matmul import (check_bf16_on_the_mxu, check_blocks_given,
                                                check_bytes_modelled, epilogue_bytes,
                                                implied_bytes, judge_blocks, k_blocks,
                                                k_dropped, legal_blocks, summed_in,
                                                summed_in_bf16_partials, tile_flops, vmem_used)

matmul = chapter("matmul")

puzzle = pytest.mark.puzzle
on_tpu = pytest.mark.tpu

MiB = 1 << 20
F32 = 4
EXACT = 1e-3   # for exact integer sums: a right kernel is exact, one bf16 step off is not


def ints(rng, shape, dtype="float32", low=-4, high=5):
    """Small integers as floats: every f32 sum of their products is exact."""
    return rng.integers(shape, low, high, dtype=dtype)


def dot(a, b):
    """a @ b (batched too) in float64, then rounded once to a's dtype."""
    return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)


# What each lesson requires of your program, checked from its trace: your own
# kernels do the matmul; nothing but reshapes happens around them unless listed.
MATMUL = Structure(inside={"dot_general"})


def tiled(M, K, N, bm, bk, bn):
    """A matmul kernel over an (i, j, k) grid of (bm, bk) x (bk, bn) blocks."""
    return MATMUL.where(grid=(cdiv(M, bm), cdiv(N, bn), K // bk),
                        blocks={"a": (bm, bk), "b": (bk, bn)})


# 1 -------------------------------------------------------------------------
@puzzle("matmul.one_block")
@pytest.mark.parametrize("M, K, N", [
    pytest.param(8, 256, 128, id="M=8 K=256 N=128"),
    pytest.param(3, 5, 7, id="M=3 K=5 N=7 (odd shape)"),
    pytest.param(512, 1024, 512, id="M=512 K=1024 N=512-tpu", marks=on_tpu),
])
def test_one_block(M, K, N, rng):
    a, b = ints(rng, (M, K)), ints(rng, (K, N))
    ran = measure(matmul.matmul_one_block, a, b, structure=MATMUL)
    check(ran, dot(a, b))
    lowers_for_tpu(ran)


# 2 -------------------------------------------------------------------------
@puzzle("matmul.k_accumulate")
@pytest.mark.parametrize("M, K, N, bm, bk, bn, dtype", [
    pytest.param(17, 384, 257, 8, 128, 128, "float32",
                 id="M=17 K=384 N=257 bm=8 bk=128 bn=128 (partial tiles)"),
    pytest.param(16, 512, 128, 16, 128, 128, "bfloat16",
                 id="M=16 K=512 N=128 bm=16 bf16 (4 k steps into one tile)"),
    pytest.param(8, 128, 128, 8, 128, 128, "float32",
                 id="M=8 K=128 N=128 (one block: k=0 is the last k)"),
    pytest.param(1024, 2048, 1024, 256, 512, 256, "float32", id="M=1024 K=2048 N=1024-tpu",
                 marks=on_tpu),
])
def test_k_accumulate(M, K, N, bm, bk, bn, dtype, rng):
    """The values; the work (each product computed once); then the bytes the blocks
    imply: a is read once per column block (N / bn times), b once per row block
    (M / bm times), each output tile written once.

    In bf16 the inputs reach 8, so a k step's products need more bits than bf16
    has: only a float32 running sum, rounded once at the end, is exact."""
    high = 9 if dtype == "bfloat16" else 5
    a, b = ints(rng, (M, K), dtype, 0, high), ints(rng, (K, N), dtype, 0, high)
    moved = measure(matmul.matmul_tiled, a, b, bm=bm, bk=bk, bn=bn,
                    structure=tiled(M, K, N, bm, bk, bn))
    check(moved, dot(a, b), blocks=(bm, bn), axes="i j",
          tolerance=EXACT if dtype == "bfloat16" else None,
          likely={"last_k_only": lambda: k_blocks(a, b, bk)[-1].astype(dtype),
                  "first_k_only": lambda: k_blocks(a, b, bk)[0].astype(dtype),
                  "bf16_accumulation": lambda: summed_in(a.dtype, a, b, bk),
                  **k_dropped(a, b, bk, dtype)})
    check_work(moved, flops=tile_flops(M, K, N, bm, bn))
    lowers_for_tpu(moved)
    itemsize = a.dtype.itemsize
    implied = implied_bytes(M, K, N, bm, bk, bn, itemsize)
    check_traffic(moved, reference=implied, minimum=(M * K + K * N + M * N) * itemsize)
    check_blocks_given(moved, implied, bm=bm, bk=bk, bn=bn)


# 3 -------------------------------------------------------------------------
def fitted(block, dim, align):
    """The block matmul() uses for a dim: the given one, rounded down to the TPU's tile
    (at least one tile), or the whole dim when that is smaller."""
    block = max(align, block // align * align)
    return dim if block >= dim else block


@puzzle("matmul.mixed_precision")
@pytest.mark.parametrize("M, K, N, dtype, high, asked", [
    pytest.param(32, 1024, 128, "bfloat16", 3, 128, id="M=32 K=1024 N=128 bf16 (8 k steps)"),
    pytest.param(20, 254, 129, "float32", 3, 128, id="M=20 K=254 N=129 (no dim a multiple of 128)"),
    # K one past a block, and one short of two: the pad must follow K % bk exactly.
    pytest.param(8, 129, 128, "float32", 3, 128, id="M=8 K=129 N=128 (one column past a block)"),
    pytest.param(48, 255, 128, "bfloat16", 3, 40, id="M=48 K=255 N=128 bf16 bm=40 (rounded to 32)"),
    # Values up to 8: each k step's product needs more bits than bf16 has, so a
    # jnp.dot without preferred_element_type shows on a TPU.
    pytest.param(2048, 2048, 2048, "bfloat16", 9, 128, id="M=K=N=2048 bf16-tpu", marks=on_tpu),
])
def test_mixed_precision(M, K, N, dtype, high, asked, rng):
    """matmul(a, b, bm=asked) with its default bk, bn (128): bk = 128 where K allows.

    Inputs are integers in [0, high): sums of non-negative terms grow, and a bf16
    running sum loses its low bits as it grows."""
    a, b = ints(rng, (M, K), dtype, 0, high), ints(rng, (K, N), dtype, 0, high)
    bm, bk, bn = (fitted(block, dim, align) for block, dim, align in
                  ((asked, M, 16 if dtype == "bfloat16" else 8), (128, K, 128), (128, N, 128)))
    ran = measure(matmul.matmul, a, b, bm=asked, structure=MATMUL.where(
        outside={"pad"}, blocks={"a": (bm, bk), "b": (bk, bn)},
        grid=(cdiv(M, bm), cdiv(N, bn), cdiv(K, bk))))   # K padded to the next block, no further
    yours = ran.output
    whole = K // bk * bk   # the K that a grid of K // bk steps covers
    check(yours, dot(a, b), tolerance=EXACT if dtype == "bfloat16" else None,
          blocks=(min(M, 128), 128), axes="i j",
          likely={"bf16_accumulation": lambda: summed_in(a.dtype, a, b, bk),
                  "bf16_partials": lambda: summed_in_bf16_partials(a, b, bk),
                  "k_tail_dropped": lambda: dot(a[:, :whole], b[:whole])})
    check_bf16_on_the_mxu(ran, a)
    check_products_on_the_mxu(ran, flops=2 * M * K * N)
    lowers_for_tpu(ran)


# 4 -------------------------------------------------------------------------
@puzzle("matmul.batched")
@pytest.mark.parametrize("B, M, K, N, bm, bk, bn, dtype", [
    pytest.param(2, 17, 256, 129, 8, 128, 128, "float32",
                 id="B=2 M=17 K=256 N=129 bm=8 bk=128 bn=128 (partial tiles)"),
    pytest.param(1, 16, 128, 128, 16, 128, 128, "bfloat16",
                 id="B=1 M=16 K=128 N=128 bf16 (batch of 1, one block)"),
    pytest.param(4, 1024, 1024, 1024, 256, 512, 256, "bfloat16",
                 id="B=4 M=K=N=1024 bf16-tpu", marks=on_tpu),
])
def test_batched(B, M, K, N, bm, bk, bn, dtype, rng):
    a, b = ints(rng, (B, M, K), dtype), ints(rng, (B, K, N), dtype)
    ran = measure(matmul.batched_matmul, a, b, bm=bm, bk=bk, bn=bn, structure=MATMUL.where(
        grid=(B, cdiv(M, bm), cdiv(N, bn), K // bk),
        blocks={"a": (None, bm, bk), "b": (None, bk, bn), "output": (None, bm, bn)}))
    check(ran, dot(a, b), blocks=(1, bm, bn), axes="B i j",
          likely={"b_from_batch_0": lambda: dot(a, np.broadcast_to(b[:1], b.shape)),
                  "a_from_batch_0": lambda: dot(np.broadcast_to(a[:1], a.shape), b),
                  "last_k_only": lambda: dot(a[..., -bk:], b[:, -bk:])})
    check_work(ran, flops=tile_flops(M, K, N, bm, bn, B))
    lowers_for_tpu(ran)


# 5 -------------------------------------------------------------------------
def gelu(x):
    """jax.nn.gelu's default, the tanh approximation, in float64."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


@puzzle("matmul.epilogue")
@pytest.mark.parametrize("M, K, N, bm, bk, bn, dtype", [
    pytest.param(9, 256, 257, 8, 128, 128, "float32",
                 id="M=9 K=256 N=257 bm=8 bk=128 bn=128 (partial tiles)"),
    pytest.param(16, 384, 128, 16, 128, 128, "bfloat16",
                 id="M=16 K=384 N=128 bm=16 bk=128 bn=128 bf16 (one tile, 3 k steps)"),
    pytest.param(1024, 2048, 1024, 256, 512, 256, "bfloat16",
                 id="M=1024 K=2048 N=1024 bf16-tpu", marks=on_tpu),
])
def test_epilogue(M, K, N, bm, bk, bn, dtype, rng):
    """The values; then fusion: the kernel moves what matmul_tiled moves plus the bias,
    and no JAX op outside it touches the [M, N] result."""
    a = ints(rng, (M, K), dtype) / np.asarray(8, dtype)   # multiples of 1/8: still exact
    b = ints(rng, (K, N), dtype) / np.asarray(8, dtype)
    bias = rng.normal((N,), dtype)
    product = np.matmul(a.astype(np.float64), b.astype(np.float64))
    bias64 = bias.astype(np.float64)
    steps = K // bk

    def out(y):
        return y.astype(dtype)

    def bias_follows_rows():   # tile (i, j) got bias block i
        i, j = np.arange(M)[:, None] // bm, np.arange(N)[None, :] % bn
        return out(gelu(product + bias64[np.clip(i * bn + j, 0, N - 1)]))

    moved = measure(matmul.matmul_bias_gelu, a, b, bias, bm=bm, bk=bk, bn=bn,
                    structure=tiled(M, K, N, bm, bk, bn).where(inside={"dot_general", "tanh"}))
    check(moved, out(gelu(product + bias64)), blocks=(bm, bn), axes="i j",
          likely={"bias_every_step": lambda: out(gelu(product + steps * bias64)),
                  "bias_missing": lambda: out(gelu(product)),
                  "activation_missing": lambda: out(product + bias64),
                  "bias_twice": lambda: out(gelu(product + 2 * bias64)),
                  "bias_after_gelu": lambda: out(gelu(product) + bias64),
                  "bias_follows_rows": bias_follows_rows})
    lowers_for_tpu(moved)
    itemsize = a.dtype.itemsize
    fused = epilogue_bytes(M, K, N, bm, bk, bn, itemsize)
    check_traffic(moved, reference=fused, minimum=(M * K + K * N + N + M * N) * itemsize,
                  outside=0)


# 6 -------------------------------------------------------------------------
@puzzle("matmul.choose_blocks")
@pytest.mark.parametrize("M, K, N, itemsize, vmem_bytes", [
    pytest.param(2048, 2048, 2048, 4, 16 * MiB, id="M=K=N=2048 f32 VMEM=16 MiB"),
    pytest.param(4096, 256, 4096, 2, 16 * MiB, id="M=4096 K=256 N=4096 bf16 VMEM=16 MiB"),
    pytest.param(48, 512, 1024, 2, 128 * 1024, id="M=48 K=512 N=1024 bf16 VMEM=128 KiB (tight)"),
    pytest.param(1, 256, 512, 4, MiB, id="M=1 K=256 N=512 f32 VMEM=1 MiB (one row, as in decoding)"),
    pytest.param(64, 256, 128, 4, 284 * 1024,
                 id="M=64 K=256 N=128 f32 VMEM=284 KiB (all of K and N fit only in few rows)"),
])
def test_choose_blocks(M, K, N, itemsize, vmem_bytes):
    blocks = matmul.choose_blocks(M, K, N, itemsize=itemsize, vmem_bytes=vmem_bytes)
    judge_blocks(blocks, M, K, N, itemsize, vmem_bytes)


@puzzle("matmul.choose_blocks")
def test_choose_blocks_on_budgets_that_bite(rng):
    """Eighty problems drawn afresh each run, each with two budgets: exactly the VMEM
    of the blocks that would be best with no budget, and one byte less, where those
    blocks no longer fit. Only a choice that follows the traffic model and the
    budget to the byte is optimal on all of them."""
    for _ in range(80):
        M = 8 * int(rng.integers((), 1, 65))
        K, N = (128 * int(rng.integers((), 1, 17)) for _ in range(2))
        itemsize = int(rng.integers((), 1, 3)) * 2
        blocks = legal_blocks(M, K, N, itemsize)
        unconstrained = min(blocks, key=lambda b: (implied_bytes(M, K, N, *b, itemsize),
                                                   vmem_used(*b, itemsize)))
        for vmem_bytes in (vmem_used(*unconstrained, itemsize),
                           vmem_used(*unconstrained, itemsize) - 1):
            if not any(vmem_used(*b, itemsize) <= vmem_bytes for b in blocks):
                continue
            chosen = matmul.choose_blocks(M, K, N, itemsize=itemsize, vmem_bytes=vmem_bytes)
            judge_blocks(chosen, M, K, N, itemsize, vmem_bytes)


@puzzle("matmul.choose_blocks")
@pytest.mark.parametrize("M, K, N, vmem_bytes", [
    pytest.param(16, 256, 256, 320 * 1024, id="M=16 K=256 N=256 f32 VMEM=320 KiB"),
    pytest.param(2048, 2048, 2048, 8 * MiB, id="M=K=N=2048 f32 VMEM=8 MiB-tpu", marks=on_tpu),
])
def test_choose_blocks_on_the_real_kernel(M, K, N, vmem_bytes, rng):
    """Your blocks in matmul_tiled (puzzle 2): moved_bytes agrees with the traffic
    model that judged them (on a TPU: the blocks compile and give the right values)."""
    blocks = matmul.choose_blocks(M, K, N, itemsize=F32, vmem_bytes=vmem_bytes)
    judge_blocks(blocks, M, K, N, F32, vmem_bytes)
    bm, bk, bn = (int(x) for x in blocks)
    a, b = ints(rng, (M, K)), ints(rng, (K, N))
    ran = measure(matmul.matmul_tiled, a, b, bm=bm, bk=bk, bn=bn,
                  structure=tiled(M, K, N, bm, bk, bn))
    if tpu_sized():
        check(ran, dot(a, b), blocks=(bm, bn), axes="i j")
        return
    check_bytes_modelled(ran, implied_bytes(M, K, N, bm, bk, bn, F32), bm=bm, bk=bk, bn=bn)
