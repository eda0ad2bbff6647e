"""Tests for exercises/quant.py. Run them, don't edit them:

    pytest exercises/test_quant.py                 # all puzzles of the chapter
    pytest exercises/test_quant.py -k int4         # one puzzle
    pytest exercises/test_quant.py -k int4 --hint

Each test compares your kernel with NumPy on at least two small shapes (one an edge
case), then checks what the lesson is about: the integer sums are exact (compared with
integer NumPy), the running sum is int32 where the inputs are int8, quantised weights
cross HBM in their stored width (int8, or two 4-bit values per byte) and are never
dequantised there, the convolution reads each input row a bounded number of times
(not once per tap), and every kernel would compile for a real TPU. Tests marked `tpu`
run realistic sizes on a real TPU and are skipped elsewhere.

int8 inputs span the whole range [-127, 127], with rows and columns of the extremes
planted, so that any sum kept in 8 bits overflows. Where the inputs are bf16, they are
small integers and the scales powers of two: every sum is exact in float32, so a right
kernel matches NumPy to the last bit and one that rounds too early cannot hide behind a
tolerance.
"""
import functools

import jax
import numpy as np
import pytest

from pytest_pallas_hints import (Structure, chapter, check, check_traffic, check_vmem,
                                 check_work, fail, lowers_for_tpu, measure)
from pytest_pallas_hints import jaxcompat
from pytest_pallas_hints.structure import carried_state

quant = chapter("quant")

puzzle = pytest.mark.puzzle
on_tpu = pytest.mark.tpu

EXACT = 1e-3   # bf16 outputs of exact sums: a right kernel is bit-exact, one bf16 step off is not


def cdiv(a, b):
    return -(-a // b)


def is_tpu_size(*dims):
    return int(np.prod(dims)) > 2 ** 24


# --- int8 inputs and their exact products ----------------------------------------

def int8s(rng, shape, *, planted_rows=False, planted_cols=False):
    """Uniform int8 in [-127, 127]; planted: the first row (column) all 127 and the last
    all -127, so that the sums reach K * 127 * 127 and any 8-bit sum overflows."""
    x = rng.integers(shape, -127, 128, dtype="int8")
    if planted_rows:
        x[0], x[-1] = 127, -127
    if planted_cols:
        x[:, 0], x[:, -1] = 127, -127
    return x


def exact(a, b):
    """a @ b in int64: the truth for integer matmuls."""
    return a.astype(np.int64) @ b.astype(np.int64)


def wrap8(x):
    """What an int8 accumulator holds: x modulo 256, in [-128, 127]."""
    return (np.asarray(x, np.int64) + 128) % 256 - 128


def check_int32_zeroed(sums, truth):
    """The int32 running sum started from 0: interpret mode fills a fresh int32 buffer with
    2147483647 (integers have no NaN), so sums that never started from 0 sit near +-2^31,
    whatever the products (and whatever earlier tiles left in the scratch) added to it.
    ``sums``: the kernel's sums, unscaled; ``truth``: the exact sums (far below 2^30)."""
    sums = np.asarray(sums, np.float64)
    if sums.shape != truth.shape or np.abs(truth).max() >= 2 ** 29:
        return
    near = np.abs(sums) > 2 ** 30
    if near.mean() > 0.5:
        fail("scratch_not_zeroed", (
            "your sums sit near +-2147483647: interpret mode fills a fresh int32 buffer with "
            "2147483647, the largest int32 (integers have no NaN), and the int32 scratch was "
            "never zeroed, so every sum started there and wrapped around. Zero it at the "
            "first k step of every tile: @pl.when(k == 0), acc_ref[...] = "
            "jnp.zeros_like(acc_ref)."),
            [("sums", f"{int(near.sum())} of {near.size} beyond 2^30 in magnitude, the exact "
                      f"ones at most {int(np.abs(truth).max()):,}")])


def k_products(a, b, bk):
    """The int64 product of each K block, in the order a kernel adds them."""
    return [exact(a[:, k:k + bk], b[k:k + bk]) for k in range(0, a.shape[1], bk)]


def check_int32_accumulator(ran, scales=()):
    """The running sum of an int8 x int8 matmul is int32: exact, what the MXU returns.
    An int8 sum wraps around (127 * 127 alone does not fit); a float32 sum holds integers
    exactly only up to 2^24 (1040 products of 127 * 127). Read from the dtypes of what
    the kernel carries from step to step; ``scales``: the arguments that must reach the
    output only once, at the last k step, never the running sum."""
    for site in ran.program.sites:
        for what, dtype, _ in carried_state(site.call):
            name = np.dtype(dtype).name
            if name == "int32":
                continue
            state = [("state", f"{what}: {name} in {site.call.name}()")]
            scaled = [w for array in scales for w, _ in ran.state_fed_by(array) if w == what]
            if scaled:
                fail("scales_per_step", (
                    f"{what} carries a running sum that the scales are multiplied into at "
                    f"every k step, as {name}: the scales are the same at every step, so they "
                    "factor out of the sum over K. Sum the int8 products in int32 and "
                    "multiply by the scales once, at the last k step."), state)
            if np.issubdtype(np.dtype(dtype), np.integer):
                fail("int8_accumulator", (
                    f"{what} carries the running sum from one k step to the next as {name}: "
                    "127 * 127 alone does not fit in 8 bits, and the sums wrap around. The "
                    "sum of int8 products belongs in int32 (preferred_element_type="
                    "jnp.int32)."), state)
            fail("accumulator_dtype", (
                f"{what} carries the running sum from one k step to the next as {name}: the "
                "sum of int8 products belongs in int32 (the MXU's int8 products arrive as "
                "int32 with preferred_element_type=jnp.int32), exact at any K, and a float "
                "only after the last k step."), state)


def check_k_padded(ran, operands):
    """Every block along K lies inside its array: K padded with zeros to whole blocks.
    ``operands``: (argument, its K dim, what to pad). A last block that hangs past the end
    of K holds garbage, which reaches every output (int8 has no NaN to show it)."""
    for array, dim, what in operands:
        for block in ran.blocks_from(array):
            size, length = block.block_shape[dim], block.array_shape[dim]
            if size and size < length and length % size:
                fail("k_not_padded", (
                    f"{what} are not padded: the last K block ({size} wide) hangs past the end "
                    f"of K ({length}) and holds garbage that reaches every output. Pad both "
                    "operands with zeros up to a multiple of bk (jnp.pad) before the call, and "
                    "let the grid cover the padded K."),
                    [("block", f"{block.name}: {size} along K, an array of {length} "
                               f"({length % size} left over)")])


def check_stored_width(ran, array, reads, what):
    """``array`` (int8 data) crossed HBM as itself: at most ``reads`` times its bytes."""
    moved = ran.bytes_from(array, "read")
    if moved > reads * array.nbytes:
        fail("dequantised_in_hbm", (
            f"{what} crossed HBM as {moved / (reads * array.nbytes):.3g} times its stored "
            "bytes: the quantised values must travel as they are stored (int8, two 4-bit "
            "values per byte) and become floats only in VMEM, inside the kernel. That is "
            "the point of quantising weights: half or a quarter of the bytes of bf16."),
            [("bytes", f"read {moved:,} B of {what}, stored in {array.nbytes:,} B "
                       f"({reads} × that allowed)")])


def tile_flops(M, K, N, bm, bn):
    """Flops of the dots over every (bm, bn) output tile, partial tiles computed whole."""
    return 2 * cdiv(M, bm) * bm * cdiv(N, bn) * bn * K


def tiled_bytes(M, K, N, bm, bk, bn, *, a_item, b_item, out_item, row_bytes=0, col_bytes=0):
    """Bytes of an (i, j, k) grid, K last: a block is fetched again only when its index
    changes. a is read once per column block unless one K block covers K; b once per row
    block unless it is a single block; row_bytes / col_bytes: a (bm, 1) / (1, bn)
    operand per row / column (a scale), the first read once, the second like b's
    columns."""
    one_k, one_n = bk >= K, bn >= N
    a_reads = 1 if one_k else cdiv(N, bn)
    b_reads = 1 if one_k and one_n else cdiv(M, bm)
    col_reads = 1 if one_n else cdiv(M, bm)
    return (M * K * a_item * a_reads + K * N * b_item * b_reads + M * N * out_item
            + M * row_bytes + N * col_bytes * col_reads)


def tiled(M, K, N, bm, bk, bn, blocks, outside=("pad",)):
    """A matmul kernel over an (i, j, k) grid, K last (cdiv(K, bk) steps: K padded to
    whole blocks), with these block shapes; nothing but `outside` around it."""
    return Structure(inside={"dot_general"}, outside=frozenset(outside),
                     grid=(cdiv(M, bm), cdiv(N, bn), cdiv(K, bk)), blocks=blocks)


# --- what the kernels do, read from their traced programs ---------------------------

def kernel_eqns(jaxpr, *, into_when=True):
    """Every equation of a kernel's jaxpr and of the jaxprs inside it (loops, the jits
    of jnp functions; the branches of pl.when unless ``into_when`` is False)."""
    for eqn in jaxpr.eqns:
        yield eqn
        if eqn.primitive.name == "cond" and not into_when:
            continue
        for inner, _ in jaxcompat.sub_jaxprs(eqn):
            yield from kernel_eqns(jaxcompat.open_jaxpr(inner)[0], into_when=into_when)


def kernels(ran):
    """(site, kernel jaxpr) of every pallas_call the program ran."""
    return [(site, jaxcompat.open_jaxpr(site.call.kernel)[0]) for site in ran.program.sites]


def learner_line(eqn):
    """[("at", "exercises/quant.py:123")]: the chapter line that made ``eqn``, if known."""
    for path, line in jaxcompat.frames(eqn):
        path = path.replace("\\", "/")
        if "/jax/" not in path and "pytest_pallas_hints" not in path \
                and not path.endswith("test_quant.py") and "/python3." not in path:
            return [("at", f"{'/'.join(path.split('/')[-2:])}:{line}")]
    return []


def narrow_float(dtype):
    dtype = np.dtype(dtype)
    return bool(jax.numpy.issubdtype(dtype, jax.numpy.floating)) and dtype.itemsize < 4


def operands_of(ran, array):
    """The kernel operands (site, operand number) whose value comes from ``array``, one of
    the arguments ``ran`` was measured with (found by identity, not by position)."""
    positions = {n for n, leaf in enumerate(jax.tree_util.tree_leaves(ran.args))
                 if leaf is array}
    return [(site, n) for site in ran.program.sites
            for n, inputs in enumerate(site.inputs) if inputs & positions]


def check_dot_in_x_dtype(ran, x, what):
    """Every dot multiplies two operands of x's dtype: the MXU takes one type, and a float32
    operand beside a bf16 x makes jnp.dot promote x to float32 too, several times slower
    on the MXU. ``what``: the weights' block, as the stub names it."""
    want = np.dtype(x.dtype)
    for site, jaxpr in kernels(ran):
        for eqn in kernel_eqns(jaxpr):
            if eqn.primitive.name != "dot_general":
                continue
            got = [np.dtype(v.aval.dtype) for v in eqn.invars[:2]]
            if any(g != want for g in got):
                fail("dot_dtype", (
                    f"the dot multiplies {got[0].name} by {got[1].name} where x is {want.name}: "
                    f"the MXU takes two operands of one type, x's. Cast {what} to x's dtype "
                    "in VMEM, .astype(x.dtype), right before the dot: with a float32 operand "
                    "beside a bf16 x the dot runs in float32, and float32 products take the "
                    "MXU several passes each."),
                    [("dot", f"{site.call.name}(): {got[0].name} x {got[1].name}, x is "
                             f"{want.name}")] + learner_line(eqn))


def check_taps_in_float32(ran):
    """The taps of a convolution are summed in float32: no einsum returns, and no
    addition sums, a float narrower than 32 bits."""
    for site, jaxpr in kernels(ran):
        for eqn in kernel_eqns(jaxpr):
            name = eqn.primitive.name
            if name not in ("dot_general", "add", "add_any") or \
                    not narrow_float(eqn.outvars[0].aval.dtype):
                continue
            dtype = np.dtype(eqn.outvars[0].aval.dtype).name
            what = (f"an einsum returns {dtype}, its sum over C rounded" if name == "dot_general"
                    else f"the taps are added in {dtype}, the running sum rounded")
            fail("taps_narrow", (
                f"{what} to {dtype}'s 8 significant bits: every tap's rounding adds up over "
                "KH * KW taps. Ask each einsum for float32 sums, preferred_element_type="
                "jnp.float32, keep the sum of the taps in float32, acc = jnp.zeros(o_ref.shape, "
                "jnp.float32), and cast once, at the store."),
                [("sum", f"{site.call.name}(): {name} in {dtype}")] + learner_line(eqn))


def check_scales_at_the_last_step(ran, scales):
    """The scales (arguments) are multiplied in only under a pl.when, not at every k step:
    a multiply that reads a value from them at the kernel's top level runs at every step."""
    for site, jaxpr in kernels(ran):
        tainted = {jaxpr.invars[n] for s, n in
                   (pair for array in scales for pair in operands_of(ran, array)) if s is site}
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "cond":
                continue
            if not any(v in tainted for v in eqn.invars if not jaxcompat.is_literal(v)):
                continue
            inner = [e.primitive.name for sub, _ in jaxcompat.sub_jaxprs(eqn)
                     for e in kernel_eqns(jaxcompat.open_jaxpr(sub)[0])]
            if eqn.primitive.name == "mul" or "mul" in inner:
                fail("scales_every_step", (
                    "the scales are multiplied in at every k step, outside the pl.when of "
                    "the last one: the int32 sum is finished only at the last k step, so "
                    "each earlier product by the scales is bm * bn multiplies thrown away "
                    "(and a store each). Multiply by a_scale * b_scale and store inside "
                    "@pl.when(k == pl.num_programs(2) - 1), once per tile."),
                    [("scaled", f"{site.call.name}(): a multiply by the scales outside "
                                "every pl.when")] + learner_line(eqn))
            tainted.update(eqn.outvars)


# 1 -------------------------------------------------------------------------------
QUANTIZE = Structure(inside={"reduce_max"})


def quantized(x):
    """(q int8, scale f32) as the kernel computes them in float32, and the ratios x / scale
    in float64 (to accept either neighbour where a ratio sits within 1e-4 of a tie)."""
    x32 = np.asarray(x, np.float32)
    amax = np.abs(x32).max(axis=1, keepdims=True)
    scale = np.where(amax > 0, amax / np.float32(127), np.float32(1)).astype(np.float32)
    ratio = x32.astype(np.float64) / scale.astype(np.float64)
    return np.clip(np.round(ratio), -127, 127).astype(np.int8), scale, ratio


def per_block_scale(amax, block_rows, yours):
    """Every row of a block scaled by the block's largest |x| (a max over the whole block).
    A partial last block's max also sees the rows past R (garbage): yours is taken there."""
    blocks = np.maximum.reduceat(amax[:, 0], np.arange(0, len(amax), block_rows))
    most = np.repeat(blocks, block_rows)[:len(amax), None]
    scale = np.where(most > 0, most / np.float32(127), 1).astype(np.float32)
    whole = len(amax) // block_rows * block_rows
    if np.shape(yours) == scale.shape:
        scale[whole:] = np.asarray(yours)[whole:]
    return scale


def near(ratio, q, rounding):
    """rounding(ratio), clipped to [-127, 127], where the kernel's float32 division may land
    on either side of an integer (x * (1 / scale) and x / scale differ in the last bit):
    q's value where it is one of the two, else the value of the smaller |ratio|."""
    low, high = (np.clip(rounding(ratio * f), -127, 127) for f in (1 - 1e-6, 1 + 1e-6))
    if np.shape(q) == np.shape(ratio):
        return np.where((q == low) | (q == high), q, low)
    return low


@puzzle("quant.quantize")
@pytest.mark.parametrize("R, C, block_rows, dtype", [
    pytest.param(33, 256, 16, "float32",
                 id="R=33 C=256 block_rows=16 (a last block of one row, a row of zeros)"),
    pytest.param(8, 128, 8, "bfloat16", id="R=8 C=128 block_rows=8 bf16 (one block)"),
    pytest.param(4096, 4096, 256, "bfloat16", id="R=C=4096 block_rows=256 bf16-tpu",
                 marks=on_tpu),
])
def test_quantize(R, C, block_rows, dtype, rng):
    """Each row its own scale (rows span four orders of magnitude); one row all zeros;
    every row reaches +127 or -127 at its largest |x|."""
    magnitude = np.exp(rng.uniform((R, 1), -4.0, 4.0, "float64"))
    x = (rng.normal((R, C), "float64") * magnitude).astype(np.dtype(jax.numpy.dtype(dtype)))
    x[R // 2] = 0
    ran = measure(quant.quantize_int8, x, block_rows=block_rows,
                  structure=QUANTIZE.where(grid=(cdiv(R, block_rows),),
                                           blocks={"x": (block_rows, C)}))
    q, scale = ran.output
    expected_q, expected_scale, ratio = quantized(x)
    amax = np.abs(np.asarray(x, np.float32)).max(axis=1, keepdims=True)
    check(scale, expected_scale, name="scale", blocks=(block_rows, 1), axes="i 1", likely={
        "zero_row_scale": lambda: np.where(amax > 0, expected_scale, 0).astype(np.float32),
        "scale_inverted": lambda: np.where(amax > 0, 127 / np.where(amax > 0, amax, 1),
                                           1).astype(np.float32),
        "scale_not_divided": lambda: np.where(amax > 0, amax, 1).astype(np.float32),
        "scale_per_block": lambda: per_block_scale(amax, block_rows, scale),
        "scale_in_bf16": lambda: np.where(amax > 0, amax / np.float32(127), 1).astype(
            x.dtype).astype(np.float32)})
    # A ratio within 1e-4 of a tie (k + 0.5) may round either way in float32.
    q = np.asarray(q)
    if q.shape == expected_q.shape:
        tie = np.abs(np.abs(ratio - np.floor(ratio)) - 0.5) < 1e-4
        either = tie & ((q == np.floor(ratio)) | (q == np.ceil(ratio)))
        expected_q = np.where(either, q, expected_q).astype(np.int8)
    check(q, expected_q, name="q", blocks=(block_rows, C), axes="i C", likely={
        "truncated": lambda: near(ratio, q, np.trunc).astype(np.int8),
        "clipped_to_128": lambda: np.clip(np.round(ratio), -128, 127).astype(np.int8)})
    if is_tpu_size(R, C):
        return
    moved = R * C * (x.itemsize + 1) + R * 4   # x read once; q and scale written once
    check_traffic(ran, reference=moved, minimum=moved)
    lowers_for_tpu(ran)


# 2 -------------------------------------------------------------------------------
@puzzle("quant.int8_dot")
@pytest.mark.parametrize("M, K, N, bm, bk, bn", [
    pytest.param(33, 384, 129, 32, 128, 128,
                 id="M=33 K=384 N=129 bm=32 bk=bn=128 (tails of one row and column, 3 k steps)"),
    pytest.param(32, 128, 128, 32, 128, 128, id="M=32 K=128 N=128 (one block: k=0 is the last k)"),
    pytest.param(2048, 2048, 2048, 256, 512, 256, id="M=K=N=2048 bm=256 bk=512 bn=256-tpu",
                 marks=on_tpu),
])
def test_int8_dot(M, K, N, bm, bk, bn, rng):
    """Exact against integer NumPy; the running sum int32; each product computed once;
    int8 blocks over HBM as the grid implies."""
    a = int8s(rng, (M, K), planted_rows=True)
    b = int8s(rng, (K, N), planted_cols=True)
    ran = measure(quant.int8_matmul_int32, a, b, bm=bm, bk=bk, bn=bn,
                  structure=tiled(M, K, N, bm, bk, bn, {"a_q": (bm, bk), "b_q": (bk, bn)}, outside=()))
    check_int32_accumulator(ran)
    truth = exact(a, b)
    check_int32_zeroed(ran.output, truth)
    check(ran, truth.astype(np.int32), blocks=(bm, bn), axes="i j", likely={
        "int8_products": lambda: np.sum([wrap8(p) for p in k_products(a, b, bk)],
                                        axis=0).astype(np.int32),
        "int8_accumulator": lambda: wrap8(truth).astype(np.int32),
        "last_k_only": lambda: k_products(a, b, bk)[-1].astype(np.int32),
        "first_k_only": lambda: k_products(a, b, bk)[0].astype(np.int32)})
    if is_tpu_size(M, K, N):
        return
    check_work(ran, flops=tile_flops(M, K, N, bm, bn))
    check_traffic(ran, reference=tiled_bytes(M, K, N, bm, bk, bn, a_item=1, b_item=1,
                                             out_item=4),
                  minimum=M * K + K * N + 4 * M * N)
    lowers_for_tpu(ran)


# 3 -------------------------------------------------------------------------------
def scales(rng, shape):
    """Positive per-row or per-column scales over two orders of magnitude, about 1/127."""
    return (np.exp(rng.uniform(shape, -2.3, 2.3, "float64")) / 127).astype(np.float32)


@puzzle("quant.dequant")
@pytest.mark.parametrize("M, K, N, bm", [
    pytest.param(33, 300, 256, 32,
                 id="M=33 K=300 N=256 bm=32 (K not a multiple of bk, a row tile of one row)"),
    pytest.param(32, 128, 129, 128,
                 id="M=32 K=128 N=129 bm=128 (one k step, a column tile of one column)"),
    pytest.param(2048, 4096, 2048, 256, id="M=2048 K=4096 N=2048 bm=256-tpu", marks=on_tpu),
])
def test_dequant(M, K, N, bm, rng):
    """int8_matmul(a_q, a_scale, b_q, b_scale, bm=bm) with bk = bn = 128: the exact integer
    product times a_scale (rows) times b_scale (columns), once, at the last k step."""
    a, b = int8s(rng, (M, K), planted_rows=True), int8s(rng, (K, N), planted_cols=True)
    a_scale, b_scale = scales(rng, (M, 1)), scales(rng, (1, N))
    bm, bk, bn = min(bm, M), min(128, K), min(128, N)
    ran = measure(quant.int8_matmul, a, a_scale, b, b_scale, bm=bm,
                  structure=tiled(M, K, N, bm, bk, bn,
                                  {"a_q": (bm, bk), "a_scale": (bm, 1), "b_q": (bk, bn), "b_scale": (1, bn)}))
    check_int32_accumulator(ran, scales=(a_scale, b_scale))
    check_scales_at_the_last_step(ran, (a_scale, b_scale))
    check_k_padded(ran, [(a, 1, "a_q's columns"), (b, 0, "b_q's rows")])
    truth = exact(a, b).astype(np.float64)
    rows, cols = a_scale.astype(np.float64), b_scale.astype(np.float64)
    whole = K // bk * bk
    if np.shape(ran.output) == truth.shape:
        check_int32_zeroed(np.asarray(ran.output, np.float64) / (rows * cols), truth)

    def b_scale_follows_rows():   # tile (i, j) took the b_scale block of its row block i
        i, j = np.arange(M)[:, None] // bm, np.arange(N)[None, :] % bn
        return (truth * rows * cols[0, np.clip(i * bn + j, 0, N - 1)]).astype(np.float32)

    check(ran, (truth * rows * cols).astype(np.float32), blocks=(bm, bn), axes="i j", likely={
        "scales_missing": lambda: truth.astype(np.float32),
        "a_scale_only": lambda: (truth * rows).astype(np.float32),
        "b_scale_only": lambda: (truth * cols).astype(np.float32),
        "int8_accumulator": lambda: (wrap8(exact(a, b)) * rows * cols).astype(np.float32),
        "k_tail_dropped": lambda: (exact(a[:, :whole], b[:whole]) * rows * cols).astype(
            np.float32),
        "b_scale_follows_rows": b_scale_follows_rows})
    if is_tpu_size(M, K, N):
        return
    Kp = cdiv(K, bk) * bk
    check_stored_width(ran, a, 1 if Kp == bk else cdiv(N, bn) * Kp / K, "a_q")
    check_stored_width(ran, b, 1 if Kp == bk and bn >= N else cdiv(M, bm) * Kp / K, "b_q")
    check_traffic(ran, reference=tiled_bytes(M, Kp, N, bm, bk, bn, a_item=1, b_item=1,
                                             out_item=4, row_bytes=4, col_bytes=4),
                  minimum=M * K + K * N + 4 * (M * N + M + N))
    lowers_for_tpu(ran)


@puzzle("quant.dequant")
@pytest.mark.parametrize("bad", [
    pytest.param("a_scale", id="a_scale of shape [M]"),
    pytest.param("b_q", id="b_q of float32"),
    pytest.param("b_scale", id="b_scale of shape [N, 1]"),
])
def test_dequant_checks_its_arguments(bad, rng):
    """Arguments of the wrong dtype or shape fail up front, with a ValueError naming them."""
    a, b = int8s(rng, (32, 128)), int8s(rng, (128, 128))
    a_scale, b_scale = scales(rng, (32, 1)), scales(rng, (1, 128))
    if bad == "a_scale":
        a_scale = a_scale[:, 0]
    elif bad == "b_q":
        b = b.astype(np.float32)
    else:
        b_scale = b_scale.T
    called = (f"int8_matmul(a_q {a.shape} {a.dtype}, a_scale {a_scale.shape}, "
              f"b_q {b.shape} {b.dtype}, b_scale {b_scale.shape})")
    raises_naming(bad, called, quant.int8_matmul, a, a_scale, b, b_scale)


def raises_naming(bad, called, fn, *args, **static):
    """Passes if fn(*args) raises a ValueError whose message names ``bad``."""
    wanted = ("expected", f'a ValueError whose message contains "{bad}"')
    try:
        jax.eval_shape(functools.partial(fn, **static), *args)
    except ValueError as error:
        if bad not in str(error):
            fail("argument_check", f'{called} raised a ValueError whose message does not '
                 f'contain "{bad}": say which argument is wrong, by its name.',
                 [("called", called), ("raised", str(error)[:200]), wanted])
        return
    except NotImplementedError:
        raise
    except Exception as error:
        fail("argument_check", f"{called} should raise a ValueError that names {bad} before "
             "any kernel is built; it failed later, with another error.",
             [("called", called),
              ("raised", f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"),
              wanted] + chapter_line_of(error))
    fail("argument_check", f"{called} should raise a ValueError that names {bad}; it raised "
         "nothing.", [("called", called), ("raised", "nothing"), wanted])


def chapter_line_of(error):
    """[("at", "exercises/quant.py:123   code")]: the innermost line of the chapter's own
    file (or a known mistake) in the error's traceback, if any."""
    import traceback

    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        path = frame.filename.replace("\\", "/")
        if path.endswith(("exercises/quant.py", "reference/quant.py")) or "/mistakes/" in path:
            return [("at", f"{'/'.join(path.split('/')[-2:])}:{frame.lineno}   "
                           f"{(frame.line or '').strip()}")]
    return []


# 4 -------------------------------------------------------------------------------
def small_ints(rng, shape, dtype, high=9):
    """Integers in [0, high) as floats: every sum of their products is exact in float32."""
    return rng.integers(shape, 0, high, dtype=dtype)


def powers_of_two(rng, shape, low=-9, high=-4):
    """Scales 2^e: a product by one is exact, so bf16 outputs are bit-exact."""
    return np.exp2(rng.integers(shape, low, high + 1, dtype="float64")).astype(np.float32)


@puzzle("quant.weight_only")
@pytest.mark.parametrize("M, K, N, bm, bk, dtype", [
    pytest.param(17, 300, 129, 16, 128, "float32",
                 id="M=17 K=300 N=129 bm=16 bk=128 (K not a multiple of bk, tails of one)"),
    pytest.param(16, 1024, 128, 16, 128, "bfloat16",
                 id="M=16 K=1024 N=128 bm=16 bk=128 bf16 (8 k steps, exact)"),
    pytest.param(1024, 4096, 4096, 256, 512, "bfloat16",
                 id="M=1024 K=N=4096 bm=256 bk=512 bf16-tpu", marks=on_tpu),
])
def test_weight_only(M, K, N, bm, bk, dtype, rng):
    """x @ (w_q * w_scale) in x's dtype; w_q crosses HBM as int8.

    In bf16, x holds integers in [0, 9), w_q in [0, 128) and the scales are powers of
    two: the sums grow, every one of them is exact in float32, and only a float32 running
    sum rounded once at the end is exact."""
    if dtype == "bfloat16":
        x = small_ints(rng, (M, K), dtype)
        w = rng.integers((K, N), 0, 128, dtype="int8")
        w_scale = powers_of_two(rng, (1, N))
    else:
        x = rng.normal((M, K), dtype)
        w = int8s(rng, (K, N), planted_cols=True)
        w_scale = scales(rng, (1, N))
    bm, bk, bn = min(bm, M), min(bk, K), min(128, N)
    ran = measure(quant.int8_weight_matmul, x, w, w_scale, bm=bm, bk=bk,
                  structure=tiled(M, K, N, bm, bk, bn, {"x": (bm, bk), "w_q": (bk, bn), "w_scale": (1, bn)}))
    check_dot_in_x_dtype(ran, x, "the int8 block")
    check_k_padded(ran, [(x, 1, "x's columns"), (w, 0, "w_q's rows")])
    x64, w64, s64 = (np.asarray(v, np.float64) for v in (x, w, w_scale))
    whole = K // bk * bk
    out = x.dtype
    check(ran, (x64 @ w64 * s64).astype(out), blocks=(bm, bn), axes="i j",
          tolerance=EXACT if dtype == "bfloat16" else None, likely={
              "scale_missing": lambda: (x64 @ w64).astype(out),
              "k_tail_dropped": lambda: (x64[:, :whole] @ w64[:whole] * s64).astype(out),
              "bf16_accumulation": lambda: summed_in_bf16(x64, w64, s64, bk, out)})
    if is_tpu_size(M, K, N):
        return
    Kp = cdiv(K, bk) * bk
    w_reads = 1 if Kp == bk and bn >= N else cdiv(M, bm)
    check_stored_width(ran, w, w_reads * Kp / K, "w_q")
    check_work(ran, flops=tile_flops(M, Kp, N, bm, bn))
    check_traffic(ran, reference=tiled_bytes(M, Kp, N, bm, bk, bn, a_item=x.itemsize,
                                             b_item=1, out_item=x.itemsize, col_bytes=4),
                  minimum=(M * K + M * N) * x.itemsize + K * N + 4 * N)
    lowers_for_tpu(ran)


@puzzle("quant.weight_only")
@pytest.mark.parametrize("bad", [
    pytest.param("w_q", id="w_q of float32"),
    pytest.param("w_scale", id="w_scale of shape [N, 1]"),
    pytest.param("bm", id="bm=8 (not a multiple of 16)"),
])
def test_weight_only_checks_its_arguments(bad, rng):
    """Arguments of the wrong dtype or shape fail up front, with a ValueError naming them."""
    x, w = rng.normal((16, 128), "float32"), int8s(rng, (128, 128))
    w_scale, bm = scales(rng, (1, 128)), 16
    if bad == "w_q":
        w = w.astype(np.float32)
    elif bad == "w_scale":
        w_scale = w_scale.T
    else:
        bm = 8
    called = (f"int8_weight_matmul(x {x.shape} {x.dtype}, w_q {w.shape} {w.dtype}, "
              f"w_scale {w_scale.shape}, bm={bm})")
    raises_naming(bad, called, quant.int8_weight_matmul, x, w, w_scale, bm=bm)


def summed_in_bf16(x, w, scale, bk, dtype):
    """A running sum rounded to bf16 after every k step, scaled at the end."""
    acc = np.zeros((x.shape[0], w.shape[1]))
    for k in range(0, x.shape[1], bk):
        acc = np.asarray((acc + x[:, k:k + bk] @ w[k:k + bk]).astype(dtype), np.float64)
    return (acc * scale).astype(dtype)


# 5 -------------------------------------------------------------------------------
def pack(u):
    """u [K, N] in 0..15 -> int8 [K // 2, N]: row 2i in the low nibble, 2i + 1 in the high."""
    return (u[0::2] | (u[1::2] << 4)).astype(np.uint8).view(np.int8)


def dequantized(u, scales, zeros, group_size):
    """(u - zero) * scale per group of K rows, in float64."""
    s = np.repeat(np.asarray(scales, np.float64), group_size, axis=0)
    z = np.repeat(np.asarray(zeros, np.float64), group_size, axis=0)
    return (u - z) * s


@puzzle("quant.int4")
@pytest.mark.parametrize("M, K, N, group_size, bm, dtype", [
    pytest.param(17, 384, 129, 128, 16, "float32",
                 id="M=17 K=384 N=129 group_size=128 bm=16 (3 groups, tails of one)"),
    pytest.param(16, 1024, 128, 128, 16, "bfloat16",
                 id="M=16 K=1024 N=128 group_size=128 bf16 (8 groups, exact)"),
    pytest.param(1024, 4096, 4096, 128, 256, "bfloat16",
                 id="M=1024 K=N=4096 group_size=128 bm=256 bf16-tpu", marks=on_tpu),
])
def test_int4(M, K, N, group_size, bm, dtype, rng):
    """Nibbles unpacked in the kernel, (u - zero) * scale per group, then the matmul;
    the packed bytes cross HBM as they are.

    Column 0 holds only 15s and column 1 only 0s, in both nibbles of every byte. In bf16,
    x holds integers, the zero points are integers and the scales powers of two: every
    sum is exact in float32."""
    groups = K // group_size
    u = rng.integers((K, N), 0, 16, dtype="int64")
    u[:, 0], u[:, 1] = 15, 0
    if dtype == "bfloat16":
        x = small_ints(rng, (M, K), dtype)
        group_scales = powers_of_two(rng, (groups, N))
        zeros = rng.integers((groups, N), 0, 4, dtype="float32")
    else:
        x = rng.normal((M, K), dtype)
        group_scales = rng.uniform((groups, N), 0.005, 0.05)
        zeros = rng.uniform((groups, N), 0.0, 15.0)
    packed = pack(u)
    bm, bn = min(bm, M), min(128, N)
    ran = measure(quant.int4_matmul, x, packed, group_scales, zeros, group_size=group_size,
                  bm=bm, structure=Structure(
                      inside={"dot_general"}, grid=(cdiv(M, bm), cdiv(N, bn), groups),
                      blocks={"x": (bm, group_size), "w_packed": (group_size // 2, bn)}))
    check_dot_in_x_dtype(ran, x, "the unpacked group, w_ref[...],")
    x64, out = np.asarray(x, np.float64), x.dtype

    def with_weights(u=u, s=group_scales, z=zeros, after_scale=False):
        if after_scale:   # u * scale - zero
            w = dequantized(u, s, 0 * z, group_size) - np.repeat(z, group_size, axis=0)
        else:
            w = dequantized(u, s, z, group_size)
        return lambda: (x64 @ w).astype(out)

    def as_the_kernel_computes(u):   # (u - zero) * scale in float32, cast to x's dtype
        s32 = np.repeat(np.asarray(group_scales, np.float32), group_size, axis=0)
        z32 = np.repeat(np.asarray(zeros, np.float32), group_size, axis=0)
        w = ((u.astype(np.float32) - z32) * s32).astype(out).astype(np.float64)
        return lambda: (x64 @ w).astype(out)

    unmasked = u.copy()   # the high nibble shifted in int32 and not masked: a byte >= 0x80
    unmasked[1::2] = (packed.astype(np.int64) % 2 ** 32) >> 4   # keeps its 1s, near 2^28
    halves = np.concatenate([u.reshape(groups, group_size // 2, 2, N)[:, :, p]   # low nibbles
                             for p in (0, 1)], axis=1).reshape(K, N)   # first, then high
    swapped = u.reshape(K // 2, 2, N)[:, ::-1].reshape(K, N)
    signed_high = u.copy()
    signed_high[1::2] = np.where(u[1::2] >= 8, u[1::2] - 16, u[1::2])
    first = (np.repeat(group_scales[:1], groups, axis=0), np.repeat(zeros[:1], groups, axis=0))
    check(ran, with_weights()(), blocks=(bm, bn), axes="i j",
          tolerance=EXACT if dtype == "bfloat16" else 1e-4, likely={
              "nibbles_swapped": with_weights(u=swapped),
              "zero_point_forgotten": with_weights(z=0 * zeros),
              "zero_point_after_scale": with_weights(after_scale=True),
              "high_nibble_signed": with_weights(u=signed_high),
              "high_nibble_unmasked": as_the_kernel_computes(unmasked),
              "halves_not_interleaved": with_weights(u=halves),
              "first_group_scales": with_weights(s=first[0], z=first[1])})
    if is_tpu_size(M, K, N):
        return
    # The packed block (k, j) and the group's scales and zeros (k, 0, j) change at every
    # step: read once per row block, unless a single block covers all of them.
    reads = 1 if groups == 1 and bn >= N else cdiv(M, bm)
    check_stored_width(ran, packed, reads, "w_packed")
    check_work(ran, flops=tile_flops(M, K, N, bm, bn))
    x_reads = 1 if groups == 1 else cdiv(N, bn)
    needed = (K * N // 2 + 2 * 4 * groups * N)
    check_traffic(ran, reference=M * K * x.itemsize * x_reads + needed * reads
                  + M * N * x.itemsize,
                  minimum=(M * K + M * N) * x.itemsize + needed)
    lowers_for_tpu(ran)


@puzzle("quant.int4")
@pytest.mark.parametrize("bad", [
    pytest.param("w_packed", id="w_packed of K rows, not K // 2"),
    pytest.param("group_size", id="group_size=96 (does not divide K=256)"),
    pytest.param("zeros", id="zeros of shape [N]"),
])
def test_int4_checks_its_arguments(bad, rng):
    """Arguments of the wrong dtype or shape fail up front, with a ValueError naming them."""
    K, N = 256, 128
    x = rng.normal((16, K), "float32")
    packed = pack(rng.integers((K, N), 0, 16, dtype="int64"))
    group_scales = rng.uniform((2, N), 0.005, 0.05)
    zeros, group_size = rng.uniform((2, N), 0.0, 15.0), 128
    if bad == "w_packed":
        packed = np.concatenate([packed, packed])
    elif bad == "group_size":
        group_size = 96
    else:
        zeros = zeros[0]
    called = (f"int4_matmul(x {x.shape}, w_packed {packed.shape}, scales "
              f"{group_scales.shape}, zeros {zeros.shape}, group_size={group_size})")
    raises_naming(bad, called, quant.int4_matmul, x, packed, group_scales, zeros,
                  group_size=group_size)


# 6 -------------------------------------------------------------------------------
def same(size, k, stride):
    """(output size, padding before) of SAME padding, as XLA computes it."""
    out = cdiv(size, stride)
    return out, max((out - 1) * stride + k - size, 0) // 2


def conv(x, w, stride=1, *, before=None, flip=False, rows=None, cols=None):
    """The NHWC convolution (cross-correlation, as lax.conv_general_dilated) in float64,
    SAME padding; ``before``: another padding before the image; ``rows``, ``cols``: the
    padded row (column) where each output row's (column's) first tap reads, where they are
    not o * stride (known wrong answers)."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    if flip:
        w = w[::-1, ::-1]
    B, H, W, C = x.shape
    KH, KW, _, F = w.shape
    (Ho, top), (Wo, left) = same(H, KH, stride), same(W, KW, stride)
    if before is not None:
        top, left = before
    xp = np.pad(x, ((0, 0), (top, (Ho - 1) * stride + KH), (left, (Wo - 1) * stride + KW),
                    (0, 0)))
    rows = np.arange(Ho) * stride if rows is None else np.asarray(rows)
    cols = np.arange(Wo) * stride if cols is None else np.asarray(cols)
    out = np.zeros((B, Ho, Wo, F))
    for kh in range(KH):
        for kw in range(KW):
            patch = xp[:, rows + kh][:, :, cols + kw]
            out += np.einsum("bhwc,cf->bhwf", patch, w[kh, kw])
    return out


def conv_geometry(H, W, KH, KW, stride, block_h):
    """(Ho, Wo, row tiles, window rows, padded rows Hp, padded width Wp) of the puzzle's
    schedule: each tile of block_h output rows reads (block_h - 1) * stride + KH rows."""
    (Ho, top), (Wo, left) = same(H, KH, stride), same(W, KW, stride)
    tiles = cdiv(Ho, block_h)
    window = (block_h - 1) * stride + KH
    return (Ho, Wo, tiles, window, max((tiles * block_h - 1) * stride + KH, top + H),
            max((Wo - 1) * stride + KW, left + W))


def check_rows_read(ran, x, KH, block_h, Hp, Wp):
    """Each padded input row is read at most ceil(KH / block_h) + 1 times, not once per tap."""
    B, _, _, C = x.shape
    row = Wp * C * x.itemsize
    most = (cdiv(KH, block_h) + 1) * B * Hp * row
    moved = ran.bytes_from(x, "read")
    if moved > most:
        fail("rows_reread", (
            f"your kernel reads the input {moved / (B * Hp * row):.3g} times over: a tile of "
            f"block_h output rows needs its own rows and the KH - 1 halo rows after them, one "
            f"window, so each input row is read at most ceil(KH / block_h) + 1 = "
            f"{cdiv(KH, block_h) + 1} times. A window per tap (or per kernel row) reads "
            "every row KH times."),
            [("bytes", f"read {moved:,} B of x · at most {most:,} B (padded rows {Hp} "
                       f"× {row:,} B per row × B={B}, {cdiv(KH, block_h) + 1} times)")])


def check_window_in_vmem(ran, x, w, out, KH, block_h, block_f, stride, Wp):
    """VMEM for a window of rows, not the whole image: two blocks of block_h * stride rows
    plus KH (room for a window built from two blocks), double-buffered; the weights and
    the output tile double-buffered; an f32 accumulator."""
    C, F, Wo = x.shape[-1], block_f, out.shape[2]
    item = x.itemsize
    rows = 2 * block_h * stride + KH
    most = (2 * rows * Wp * C * item + 2 * w.shape[0] * w.shape[1] * C * F * item
            + 2 * block_h * Wo * F * item + 4 * block_h * Wo * F)
    check_vmem(ran, most=most, why=f"one window of the input's rows ({rows} rows at most, "
                                   "halo included) at a time, never the whole image.")


CONV = Structure(inside={"dot_general"}, outside={"pad"})


@puzzle("quant.halo")
@pytest.mark.parametrize("B, H, W, C, F, KH, KW, block_h, dtype", [
    pytest.param(2, 9, 7, 4, 8, 3, 3, 4, "float32",
                 id="B=2 H=9 W=7 C=4 F=8 3x3 block_h=4 (odd sizes, a partial tile)"),
    pytest.param(1, 16, 8, 8, 16, 5, 1, 4, "float32",
                 id="B=1 H=16 W=8 C=8 F=16 5x1 block_h=4 (a filter one column wide)"),
    pytest.param(1, 8, 8, 16, 16, 3, 3, 8, "bfloat16",
                 id="B=1 H=W=8 C=F=16 3x3 block_h=8 bf16 (one tile, exact)"),
    pytest.param(8, 56, 56, 128, 128, 3, 3, 8, "bfloat16",
                 id="B=8 H=W=56 C=F=128 3x3 block_h=8 bf16-tpu", marks=on_tpu),
])
def test_halo(B, H, W, C, F, KH, KW, block_h, dtype, rng):
    """SAME convolution, stride 1: right values, the taps summed in float32, one dot per tap
    over each tile, each input row read a bounded number of times, a window of rows in VMEM.

    In bf16, x and w hold small integers: every sum is exact in float32, so only taps
    summed in float32 and rounded once, at the store, match NumPy to the last bit."""
    if dtype == "bfloat16":
        x, w = small_ints(rng, (B, H, W, C), dtype), small_ints(rng, (KH, KW, C, F), dtype)
    else:
        x, w = rng.normal((B, H, W, C)), rng.normal((KH, KW, C, F))
    Ho, Wo, tiles, window, Hp, Wp = conv_geometry(H, W, KH, KW, 1, block_h)
    ran = measure(quant.conv2d_rows, x, w, block_h=block_h, structure=CONV.where(
        grid=(B, tiles)))
    check_taps_in_float32(ran)
    def window_by_blocks():   # window i starts at padded row i, not i * block_h: output
        rows = np.arange(H)   # row i * block_h + r is the right output row i + r
        return conv(x, w)[:, rows // block_h + rows % block_h].astype(out)

    def image_0_only():       # every window taken from the first image
        return np.broadcast_to(conv(x[:1], w), (B, H, W, F)).astype(out)

    out = x.dtype
    check(ran, conv(x, w).astype(out), blocks=(1, block_h, None, None),
          axes="B H W F", tolerance=EXACT if dtype == "bfloat16" else 1e-4, likely={
              "kernel_flipped": lambda: conv(x, w, flip=True).astype(out),
              "padded_after_only": lambda: conv(x, w, before=(0, 0)).astype(out),
              "window_by_blocks": window_by_blocks,
              "image_0_only": image_0_only})
    if is_tpu_size(B, H, W, C):
        return
    check_rows_read(ran, x, KH, block_h, Hp, Wp)
    check_window_in_vmem(ran, x, w, ran.output, KH, block_h, F, 1, Wp)
    check_work(ran, flops=2 * B * tiles * block_h * W * C * F * KH * KW)
    item = x.itemsize
    windows = item * B * tiles * window * Wp * C     # one window of rows per tile
    check_traffic(ran, reference=windows + item * (w.size + B * H * W * F),
                  minimum=item * (x.size + w.size + B * H * W * F),
                  shares=[(x, windows), (w, item * w.size)])
    lowers_for_tpu(ran)


# 7 -------------------------------------------------------------------------------
@puzzle("quant.strided")
@pytest.mark.parametrize("B, H, W, C, F, KH, stride, block_h, block_f", [
    pytest.param(2, 9, 7, 4, 129, 3, 2, 2, 128,
                 id="B=2 H=9 W=7 C=4 F=129 3x3 stride=2 block_h=2 block_f=128 (a last "
                    "channel block of one)"),
    pytest.param(1, 8, 8, 8, 8, 5, 2, 4, None,
                 id="B=1 H=W=8 C=F=8 5x5 stride=2 block_h=4 (even sizes, one tile)"),
    pytest.param(8, 56, 56, 128, 256, 3, 2, 8, 128,
                 id="B=8 H=W=56 C=128 F=256 3x3 stride=2 block_h=8 block_f=128-tpu",
                 marks=on_tpu),
])
def test_strided(B, H, W, C, F, KH, stride, block_h, block_f, rng):
    """conv2d(x, w, stride, block_h, block_f): SAME padding for the stride, the output
    channels in blocks of block_f along the grid's last axis, each input window fetched
    once for all of them."""
    x, w = rng.normal((B, H, W, C)), rng.normal((KH, KH, C, F))
    Ho, Wo, tiles, window, Hp, Wp = conv_geometry(H, W, KH, KH, stride, block_h)
    bf = F if block_f is None else min(block_f, F)
    ran = measure(quant.conv2d, x, w, stride=stride, block_h=block_h, block_f=block_f,
                  structure=CONV.where(grid=(B, tiles, cdiv(F, bf))))
    half = (KH - 1) // 2
    tile, r = np.arange(Ho) // block_h, np.arange(Ho) % block_h   # output row = tile, row in it

    def first_block_weights():   # every channel block computed with w[..., :bf]
        return conv(x, np.tile(w[..., :bf], (1, 1, 1, cdiv(F, bf)))[..., :F], stride).astype(
            np.float32)

    check(ran, conv(x, w, stride).astype(np.float32), blocks=(1, block_h, None, bf),
          axes="B H W F", tolerance=1e-4, likely={
              "padding_symmetric": lambda: conv(x, w, stride, before=(half, half)).astype(
                  np.float32),
              "padded_after_only": lambda: conv(x, w, stride, before=(0, 0)).astype(np.float32),
              "first_block_weights": first_block_weights,
              "window_start_without_stride": lambda: conv(   # tile i's window at row i * block_h
                  x, w, stride, rows=tile * block_h + r * stride).astype(np.float32),
              "patches_at_stride_1": lambda: conv(           # stride not bound in the kernel
                  x, w, stride, rows=tile * block_h * stride + r,
                  cols=np.arange(Wo)).astype(np.float32)})
    if is_tpu_size(B, H, W, C):
        return
    check_rows_read(ran, x, KH, block_h, Hp, Wp)
    check_window_in_vmem(ran, x, w, ran.output, KH, block_h, bf, stride, Wp)
    check_work(ran, flops=2 * B * tiles * block_h * Wo * C * cdiv(F, bf) * bf * KH * KH)
    item = x.itemsize
    w_reads = 1 if bf >= F else B * tiles            # the filter's blocks, once per tile
    windows = item * B * tiles * window * Wp * C     # one window of rows per tile
    check_traffic(ran, reference=windows + item * (w_reads * w.size + B * Ho * Wo * F),
                  minimum=item * (x.size + w.size + B * Ho * Wo * F),
                  shares=[(x, windows), (w, item * w_reads * w.size)])
    lowers_for_tpu(ran)


@puzzle("quant.strided")
@pytest.mark.parametrize("bad", [
    pytest.param("w", id="w with another C"),
    pytest.param("stride", id="stride=0"),
    pytest.param("block_f", id="block_f=255 for F=256 (neither all of F nor 128s)"),
])
def test_strided_checks_its_arguments(bad, rng):
    x, w = rng.normal((1, 8, 8, 4)), rng.normal((3, 3, 4, 256))
    stride, block_f = 1, None
    if bad == "w":
        w = w[:, :, :2]
    elif bad == "stride":
        stride = 0
    else:
        block_f = 255
    called = f"conv2d(x {x.shape}, w {w.shape}, stride={stride}, block_f={block_f})"
    raises_naming(bad, called, quant.conv2d, x, w, stride=stride, block_h=4, block_f=block_f)
