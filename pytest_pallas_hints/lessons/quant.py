"""The quant chapter's lesson machinery: what its tests know beyond the right answers.

* models of known wrong answers: an int8 running sum that wraps (``wrap8``), the
  product of one K block only (``k_products``), scales taken per block of rows, ratios
  truncated, a running sum rounded to bf16 at every k step, a convolution with the
  filter flipped or the padding misplaced (``conv``'s flags);
* budgets: the flops and bytes of an (i, j, k) matmul grid (``tile_flops``,
  ``tiled_bytes``), the geometry of a convolution's windows of rows and the bytes and
  VMEM they may take (``conv_geometry``, ``check_rows_read``, ``check_window_in_vmem``);
* checks that word the chapter's own findings: the int32 accumulator and its zeroing,
  K padded to whole blocks, quantised operands crossing HBM in their stored width, the
  arguments checked up front (``raises_naming``);
* readers of the traced kernels: a taint walk from the scales' operands (multiplied in
  only under the last step's pl.when), the dtypes of every dot and every sum of taps.
"""
import functools

import jax

from .. import jaxcompat
from ..checking import check_vmem, fail, raised
from ..frozen import np
from ..structure import carried_state
from .common import cdiv


# --- int8 sums: what a wrong accumulator holds, and checks of it --------------------

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
    if (sums == 2 ** 31 - 1).all():
        fail("int_fill", (
            "every value is 2147483647, what interpret mode fills a fresh int32 buffer with "
            "(integers have no NaN): no sum reached the output, which holds what it held "
            "before the kernel ran. Does the store run? It sits under a pl.when that holds "
            "at the last k step, k == pl.num_programs(2) - 1, with k = pl.program_id(2): "
            "the K axis is axis 2 (0 and 1 are the tiles of M and N)."),
            [("sums", f"all {sums.size} equal 2147483647, the exact ones at most "
                      f"{int(np.abs(truth).max()):,}")])
    if near.mean() > 0.5:
        fail("scratch_not_zeroed", (
            "your sums sit near +-2147483647: interpret mode fills a fresh int32 buffer with "
            "2147483647, the largest int32 (integers have no NaN), so most sums started "
            "there and wrapped around. Is the int32 scratch zeroed at the first k step of "
            "every tile, @pl.when(k == 0) with k = pl.program_id(2) (the K axis), "
            "acc_ref[...] = jnp.zeros_like(acc_ref), before the first +=?"),
            [("sums", f"{int(near.sum())} of {near.size} beyond 2^30 in magnitude, the exact "
                      f"ones at most {int(np.abs(truth).max()):,}")])


def k_products(a, b, bk):
    """The int64 product of each K block, in the order a kernel adds them."""
    return [exact(a[:, k:k + bk], b[k:k + bk]) for k in range(0, a.shape[1], bk)]


def check_int8_product(ran):
    """Every matmul of the kernels multiplies int8 by int8 (the MXU's integer product,
    summed in int32): read from the program, since a float32 product of small integers
    gives the same values here."""
    for site, jaxpr in kernels(ran):
        for eqn in jaxcompat.equations(jaxpr):
            if eqn.primitive.name != "dot_general":
                continue
            dtypes = [np.dtype(v.aval.dtype).name for v in eqn.invars[:2]]
            if dtypes != ["int8", "int8"]:
                fail("int8_product", (
                    f"your kernel multiplies the blocks as {' x '.join(dtypes)}: the lesson "
                    "is the MXU's int8 x int8 product, exact, at twice the bf16 rate, "
                    "summed in int32: jnp.dot(a_int8, b_int8, preferred_element_type="
                    "jnp.int32). Cast nothing before the dot; a float product of small "
                    "integers gives the same values here, and half the speed on a TPU."),
                    [("dot", f"{site.call.name}(): {' x '.join(dtypes)}")]
                    + learner_line(eqn))


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


# --- work and bytes of an (i, j, k) matmul grid -------------------------------------

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


# --- what the kernels do, read from their traced programs ---------------------------

def kernel_eqns(jaxpr, *, into_when=True):
    """Every equation of a kernel's jaxpr and of the jaxprs inside it (loops, the jits
    of jnp functions; the branches of pl.when unless ``into_when`` is False)."""
    yield from jaxcompat.equations(jaxpr, into=None if into_when else lambda eqn: not isinstance(
        jaxcompat.control(eqn), jaxcompat.Branches))


def kernels(ran):
    """(site, kernel jaxpr) of every pallas_call the program ran."""
    return [(site, site.call.kernel) for site in ran.program.sites]


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
            inner = [e.primitive.name for sub, _ in jaxcompat.parts(eqn)
                     for e in kernel_eqns(sub)]
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
    check_stored_at_one_k_step(ran)


def check_stored_at_one_k_step(ran, k_axis=2):
    """Walked over the grid, each output tile is stored at one k step: a store (and the
    multiply by the scales before it) under a pl.when that holds at every k step is
    made K / bk times, and all but the last are thrown away."""
    for run, counts in zip(ran.executed, ran.counts):
        outputs, steps = set(run.site.call.output_refs), {}
        for point, operand in counts.stores:
            if operand in outputs and len(point) > k_axis:
                tile = (operand, point[:k_axis] + point[k_axis + 1:])
                steps.setdefault(tile, set()).add(point[k_axis])
        most = max(map(len, steps.values()), default=0)
        if most > 1:
            fail("scales_every_step", (
                f"your kernel stores an output tile at {most} k steps: the int32 sum is "
                "finished only at the last one, so every earlier store, and the multiply by "
                "the scales before it, is thrown away. Is the pl.when around them true at "
                "every k? Store inside @pl.when(k == pl.num_programs(2) - 1), once per tile."),
                [("stored", f"{run.site.call.name}(): one output tile stored at {most} of "
                            f"the grid's {run.site.call.grid[k_axis]} k steps")])


# --- 1. quantize: known wrong scales and roundings ----------------------------------

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


# --- arguments checked up front -----------------------------------------------------

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
              ("raised", raised(error)),
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


# --- 4. weight_only: a running sum rounded to bf16 ----------------------------------

def summed_in_bf16(x, w, scale, bk, dtype):
    """A running sum rounded to bf16 after every k step, scaled at the end."""
    acc = np.zeros((x.shape[0], w.shape[1]))
    for k in range(0, x.shape[1], bk):
        acc = np.asarray((acc + x[:, k:k + bk] @ w[k:k + bk]).astype(dtype), np.float64)
    return (acc * scale).astype(dtype)


# --- 5. int4: the weights a packing gives, and known wrong unpackings ---------------

def dequantized(u, scales, zeros, group_size):
    """(u - zero) * scale per group of K rows, in float64."""
    s = np.repeat(np.asarray(scales, np.float64), group_size, axis=0)
    z = np.repeat(np.asarray(zeros, np.float64), group_size, axis=0)
    return (u - z) * s


def int4_mistakes(x, u, packed, group_scales, zeros, group_size):
    """Known wrong answers of quant.int4 (``check(..., likely=)``): x @ the weights that a
    wrong unpacking or dequantisation of ``packed`` gives, in x's dtype, each a function
    computed only on failure. ``u``: the 4-bit values [K, N] that ``packed`` holds."""
    K, N = u.shape
    groups = K // group_size
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
    return {
        "nibbles_swapped": with_weights(u=swapped),
        "zero_point_forgotten": with_weights(z=0 * zeros),
        "zero_point_after_scale": with_weights(after_scale=True),
        "zero_point_added": with_weights(z=-zeros),
        **({"first_group_only": lambda: (   # stored at the first group step: group 0 alone
            x64[:, :group_size] @ dequantized(u, group_scales, zeros, group_size)[:group_size]
        ).astype(out)} if groups > 1 else {}),
        "high_nibble_signed": with_weights(u=signed_high),
        "high_nibble_unmasked": as_the_kernel_computes(unmasked),
        "halves_not_interleaved": with_weights(u=halves),
        "first_group_scales": with_weights(s=first[0], z=first[1]),
        **({"first_group_dropped": lambda: (   # the accumulator zeroed after group 0 added
            x64[:, group_size:] @ dequantized(u, group_scales, zeros, group_size)[group_size:]
        ).astype(out)} if groups > 1 else {})}


# --- 6-7. convolutions: SAME padding, the model and its known wrong variants, budgets ---

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
