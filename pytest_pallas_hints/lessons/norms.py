"""The norms chapter's lesson machinery: what exercises/test_norms.py knows about
row statistics (softmax, RMSNorm, LayerNorm, the fused cross-entropy) beyond the right
answers, which the test file keeps as float64 NumPy models.

* Budgets: the bytes each puzzle's kernels move between HBM and VMEM (``*_bytes``),
  the VMEM of the kernels whose row (or logits tile) must never be whole in it
  (``*_vmem``, ``lane_statistics`` for the per-row statistics), the flops of the
  cross-entropy's dots (``xent_flops``).
* Models of known wrong answers, in float64 NumPy, and the ``likely=`` dicts built
  from them (``*_likely``): the online softmax with its statistics not rescaled, or
  reset at every block (``online64``); LayerNorm with an unbiased variance
  (``layer_norm64(ddof=1)``); the cross-entropy of one vocabulary block, without its
  label term or without dloss (``xent64``); per-block partial sums (``row_blocks``).
* Checks that word a learner's sentence (``check_*``, ``Saved.check``): what a
  function returns, a bf16 output rounded once, what a forward rule saves, a
  custom_vjp function called alone, every vocabulary block read, no [T, V] array
  outside VMEM, the three cross-entropy grids, a bad label refused up front.
* ``with_grads``: a function and its gradients through jax.vjp, as one function to
  measure, its arguments named (a backward rule's wrong output structure named).
"""
import functools
import inspect
import math
import re

import jax
import jax.numpy as jnp

from .. import diagnose
from ..checking import Mismatch, check, fail, line_of, raised
from ..diagnose import Finding
from ..jaxcompat import equations as jax_equations
from ..frozen import np
from .common import cdiv, f64


# --- budgets: work, bytes and VMEM ----------------------------------------------

def lane_statistics(block_rows):
    """VMEM a kernel may spend on per-row statistics: two (block_rows, 128) float32
    buffers (one float per row, or a row of 128 lanes as TPU kernels often keep)."""
    return 2 * block_rows * 128 * 4


def long_rows_vmem(block_rows, block_cols, itemsize):
    """VMEM of a two-pass softmax whose row is never whole in VMEM: one (block_rows,
    block_cols) block of x and one of the output at a time (two buffers each), and the
    per-row statistics."""
    block = block_rows * block_cols * itemsize
    return 2 * 2 * block + lane_statistics(block_rows)


def softmax_grad_bytes(x, *, passes):
    """(reference, minimum) bytes of softmax's forward and backward kernels: forward: x
    read once per pass, y written; backward: y and dy read once per pass, dx written.
    The minimum reads each of them once."""
    return (passes + 1 + 2 * passes + 1) * x.nbytes, 5 * x.nbytes


def rms_forward_bytes(x, scale):
    """Bytes of RMSNorm's forward: x and scale read once, y and one float32 per row
    (1 / rms) written."""
    R = x.shape[0]
    return x.nbytes + scale.nbytes + x.nbytes + R * 4


def rms_norm_bytes(x, scale):
    """Bytes of RMSNorm's two kernels: the forward reads x and scale and writes y and
    1 / rms (one float32 per row); the backward reads x, scale, 1 / rms and dy and
    writes dx and dscale."""
    R, D = x.shape
    row, vector = R * D * x.itemsize, D * scale.itemsize
    # forward: x, scale in; y, 1/rms out. backward: x, scale, 1/rms, dy in; dx, dscale out.
    return (row + vector + row + 4 * R) + (2 * row + vector + 4 * R + row + vector)


def layer_norm_bytes(x, scale):
    """Bytes of LayerNorm's two kernels: the forward reads x, scale and bias and writes y,
    the mean and 1 / std (a float32 each per row); the backward reads x, scale, the mean,
    1 / std and dy and writes dx, dscale and dbias."""
    R, D = x.shape
    row, vector = R * D * x.itemsize, D * scale.itemsize
    # forward: x, scale, bias in; y, mean, 1/std out. backward: x, scale, mean, 1/std,
    # dy in; dx, dscale, dbias out.
    return (row + 2 * vector + row + 8 * R) + (2 * row + vector + 8 * R + row + 2 * vector)


def xent_flops(T, D, V, block_t, block_v, dots):
    """Flops of `dots` (block_t x D) @ (D x block_v)-sized dots per (token block,
    vocabulary block) pair."""
    return cdiv(T, block_t) * cdiv(V, block_v) * dots * 2 * block_t * D * block_v


def fused_xent_vmem(block_t, block_v, D, itemsize):
    """VMEM of the fused cross-entropy forward: one block of h and one of w at a time
    (two buffers each), and a few numbers per token (the logits tile is a value, never a
    buffer)."""
    tile = (block_t * D + D * block_v) * itemsize
    return 2 * tile + 2 * 3 * block_t * 4 + 3 * lane_statistics(block_t) // 2


def fused_xent_bytes(h, w, *, block_t):
    """(reference, minimum) bytes of the fused cross-entropy forward: h read once, w
    once per token block (at least once), and three float32 per token (the labels in,
    loss and lse out)."""
    T = h.shape[0]
    per_token = T * 4
    return (h.nbytes + cdiv(T, block_t) * w.nbytes + 3 * per_token,
            h.nbytes + w.nbytes + 3 * per_token)


def xent_backward_bytes(h, w, *, block_t, block_v):
    """(reference, minimum) bytes of cross_entropy's three kernels: the forward (h once,
    w once per token block), the dh kernel (the same, and dh written) and the dw kernel
    (h once per vocabulary block, w read and dw written), each with three float32 per
    token (labels, lse, dloss). The minimum reads h and w once per kernel."""
    T, V = h.shape[0], w.shape[1]
    num_t, num_v = cdiv(T, block_t), cdiv(V, block_v)
    per_token = T * 4
    forward = h.nbytes + num_t * w.nbytes + 3 * per_token
    dh_kernel = h.nbytes + num_t * w.nbytes + 3 * per_token + h.nbytes
    dw_kernel = num_v * (h.nbytes + 3 * per_token) + w.nbytes + w.nbytes
    return (forward + dh_kernel + dw_kernel,
            forward + h.nbytes + w.nbytes + 3 * per_token + h.nbytes + w.nbytes)


# --- models of known wrong answers, in float64 NumPy ------------------------------

def online64(x, block_cols, *, rescale=True, reset=False):
    """softmax from the running max and sum taken column block by column block:
    rescale=False leaves l unrescaled when the max moves; reset=True keeps only the
    last block's statistics."""
    x, = f64(x)
    m = np.full((x.shape[0], 1), -np.inf)
    l = np.zeros_like(m)
    for start in range(0, x.shape[1], block_cols):
        block = x[:, start:start + block_cols]
        if reset:
            m, l = np.full_like(m, -np.inf), np.zeros_like(l)
        m_new = np.maximum(m, block.max(axis=1, keepdims=True))
        l = (np.exp(m - m_new) if rescale else 1) * l + np.exp(block - m_new).sum(axis=1,
                                                                              keepdims=True)
        m = m_new
    return np.exp(x - m) / l


def layer_norm64(x, scale, bias, dy, eps, *, ddof=0, eps_outside=False):
    """LayerNorm's y, dx, dscale, dbias and its pieces; ddof=1: the unbiased variance;
    eps_outside: 1 / (std + eps) for 1 / sqrt(var + eps)."""
    x, scale, bias, dy = f64(x, scale, bias, dy)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).sum(axis=1, keepdims=True) / (x.shape[1] - ddof)
    rstd = 1 / (np.sqrt(var) + eps) if eps_outside else 1 / np.sqrt(var + eps)
    x_hat = (x - mean) * rstd
    g = dy * scale
    dx = rstd * (g - g.mean(axis=1, keepdims=True) - x_hat * (g * x_hat).mean(axis=1,
                                                                               keepdims=True))
    return dict(y=x_hat * scale + bias, dx=dx, dscale=(dy * x_hat).sum(axis=0),
                dbias=dy.sum(axis=0), mean=mean, rstd=rstd, x_hat=x_hat, g=g)


def xent64(h, w, labels, dloss=None, *, blocks=None, padded=0):
    """loss [T], lse [T] and, with dloss, dh and dw of cross_entropy, in float64.
    blocks=(first, stop): the statistics of vocabulary columns [first, stop) only (a
    logsumexp over one block; the label's logit counts only if it lies there).
    padded: that many more columns of logit 0 (a vocabulary tail masked to 0.0, not
    -inf)."""
    h, w = f64(h, w)
    logits = h @ w
    if padded:
        logits = np.concatenate([logits, np.zeros((len(logits), padded))], axis=1)
    T = len(labels)
    picked = logits[np.arange(T), labels]
    if blocks is not None:
        first, stop = blocks
        logits = logits[:, first:stop]
        picked = np.where((labels >= first) & (labels < stop), picked, 0.0)
    m = logits.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(logits - m).sum(axis=1))
    out = dict(loss=lse - picked, lse=lse)
    if dloss is not None:
        dlogits = np.exp(logits - lse[:, None])
        out["no_label_term"] = dlogits * np.asarray(dloss, np.float64)[:, None]
        dlogits[np.arange(T), labels] -= 1
        out["undirected"] = dlogits
        dlogits = dlogits * np.asarray(dloss, np.float64)[:, None]
        out.update(dh=dlogits @ w.T, dw=h.T @ dlogits, dlogits=dlogits)
    return out


def row_blocks(values, block_rows):
    """Per-block sums over rows: [num_blocks, ...]."""
    return np.stack([values[s:s + block_rows].sum(axis=0)
                     for s in range(0, len(values), block_rows)])


def rms_dx_likely(truth, dtype):
    """RMSNorm's dx without the mean term, and with a sum where the formula takes its
    mean (``truth``: ``rms64``'s pieces)."""
    return {"no_mean_term": lambda: (truth["inv_rms"] * truth["g"]).astype(dtype),
            "sum_not_mean": lambda: (truth["inv_rms"] * (
                truth["g"] - truth["x_hat"] * (truth["g"] * truth["x_hat"]).sum(
                    axis=1, keepdims=True))).astype(dtype)}


def layer_norm_y_likely(x, scale, bias, dy, dtype):
    """LayerNorm's y with the unbiased variance (divided by D - 1), with eps outside the
    square root, and not centred (an RMSNorm with a bias)."""
    x64, scale64, bias64 = f64(x, scale, bias)
    ms = (x64 * x64).mean(axis=1, keepdims=True)
    return {"unbiased_variance": lambda: layer_norm64(x, scale, bias, dy, 1e-5,
                                                      ddof=1)["y"].astype(dtype),
            "eps_outside": lambda: layer_norm64(x, scale, bias, dy, 1e-5,
                                                eps_outside=True)["y"].astype(dtype),
            "not_centred": lambda: (x64 / np.sqrt(ms + 1e-5) * scale64 + bias64)
            .astype(dtype)}


def layer_norm_dx_likely(truth, dtype):
    """LayerNorm's dx without the mean of g, or without the mean of g * x_hat
    (``truth``: ``layer_norm64``'s pieces)."""
    g, x_hat = truth["g"], truth["x_hat"]

    def dx_without(mean_g=True, mean_gx=True):
        return lambda: (truth["rstd"] * (
            g - (g.mean(axis=1, keepdims=True) if mean_g else 0)
            - (x_hat * (g * x_hat).mean(axis=1, keepdims=True) if mean_gx else 0))).astype(dtype)

    return {"no_mean_of_g": dx_without(mean_g=False), "no_mean_term": dx_without(mean_gx=False)}


def vocabulary_block_likely(h, w, labels, *, block_v):
    """{"loss": ..., "lse": ...}: the statistics of one vocabulary block only, the last
    (or, for the loss, the first): running statistics restarted at every step."""
    V = w.shape[1]
    first = (V - 1) // block_v * block_v

    def one_block(part, start, stop):
        return lambda: xent64(h, w, labels, blocks=(start, stop))[part].astype(np.float32)

    def tail_zero(part):   # the columns past V given logit 0, not -inf
        padded = cdiv(V, block_v) * block_v - V
        return lambda: xent64(h, w, labels, padded=padded)[part].astype(np.float32)

    likely = {"loss": {"last_vocabulary_block": one_block("loss", first, V),
                       "first_vocabulary_block": one_block("loss", 0, block_v)},
              "lse": {"last_vocabulary_block": lambda: one_block("lse", first, V)()[:, None]}}
    # lse - picked turned around: picked - lse
    likely["loss"]["loss_sign_flipped"] = lambda: -xent64(h, w, labels)["loss"].astype(np.float32)
    # lse = log(l) without the running max m that l was taken against
    likely["loss"]["lse_without_max"] = lambda: (
        xent64(h, w, labels)["loss"] - (f64(h)[0] @ f64(w)[0]).max(axis=1)).astype(np.float32)
    if V % block_v:
        likely["loss"]["tail_zero"] = tail_zero("loss")
        likely["lse"]["tail_zero"] = lambda: tail_zero("lse")()[:, None]
    return likely


def xent_grads_likely(h, w, truth, dtype, labels=None, dloss=None):
    """{"dh": ..., "dw": ...}: the gradients without the label's -1 (no_label_term) and
    without dloss (dloss_ignored) (``truth``: ``xent64``'s pieces, with dloss); for
    bfloat16 inputs, with labels and dloss, from logits and lse rounded to bfloat16
    before exp(logits - lse) (logits_in_bf16)."""
    h64, w64 = f64(h, w)

    def grads(dlogits):
        return {"dh": lambda: (dlogits @ w64.T).astype(dtype),
                "dw": lambda: (h64.T @ dlogits).astype(dtype)}

    no_label, undirected = grads(truth["no_label_term"]), grads(truth["undirected"])
    likely = {name: {"no_label_term": no_label[name], "dloss_ignored": undirected[name]}
              for name in ("dh", "dw")}
    if jnp.dtype(dtype) == jnp.bfloat16 and labels is not None and dloss is not None:
        def rounded(name):
            def model():
                logits, lse = f64((h64 @ w64).astype(jnp.bfloat16),
                                  truth["lse"][:, None].astype(jnp.bfloat16))
                dlogits = np.exp(logits - lse)
                dlogits[np.arange(len(labels)), labels] -= 1
                return grads(dlogits * f64(dloss)[0][:, None])[name]()
            return model

        for name in ("dh", "dw"):
            likely[name]["logits_in_bf16"] = rounded(name)
    return likely


# --- checks that word a learner's sentence ---------------------------------------

def check_values(ran, yours, expected, *, tail=None, sums=False, **options):
    """``check``, with what the kit can show about why, for words that may then name it.
    NaN in an output comes from a scratch read before anything wrote it, or from the
    garbage past the end of an array, and words keyed to the symptom alone may only ask
    which. What shows one of them sets the first finding's detail (and a fact row):

    * "unset": the walk of the traced program saw a scratch loaded at a grid step where
      no store had reached it yet (the line is shown);
    * "some_blocks": NaN in some output blocks only, though each of them sums over the
      same blocks, the one that hangs off the end among them: a mask that holds for
      some program ids and not others (keyed to another grid axis?);
    * "tail" / "no_tail": ``tail``, a fact of the configuration (does a block hang off
      the end of the array this output sums or is blocked over?), where nothing above
      showed more.

    Any wrong value: "reset_twice" where the walk saw a scratch's reset (a known value
    stored over all of it) run at two grid steps of one block along the first grid axis
    (a pl.when that fires in both passes), and a "max_axis" finding first where a
    kernel takes a max (with ``sums``, a sum too: a softmax's row statistics) over another
    axis than a row's (its last). A "rounding" finding gets detail "f32" where the
    program holds no value narrower than float32: bf16 rounded nothing there."""
    try:
        check(yours, expected, **options)
    except Mismatch as error:
        findings = error.findings()
        if not _narrow(ran):   # no bf16 anywhere: small errors are not its rounding
            for finding in findings:
                if finding.kind == "rounding":
                    finding.detail = "f32"
        first = findings[0]
        twice, across = _reset_twice(ran), _max_across_rows(ran, sums)
        if first.kind in ("nan", "never_stored", "unwritten") and first.detail != "no_store":
            unset = _unset_reads(ran)
            nan = np.isnan(f64(error.yours)[0]) & ~np.isnan(f64(error.expected)[0])
            if unset:
                point, eqn = unset[0]
                first.detail = "unset"
                first.facts.append(("read unset", f"grid step {_step(point)}: {line_of(eqn)}"))
            elif tail and first.detail != "tail" and _some_blocks(nan, expected.shape,
                                                                  options.get("blocks")):
                first.detail = "some_blocks"
            elif tail is not None and first.detail != "tail" and not twice:
                first.detail = "tail" if tail else "no_tail"
        if twice and not first.detail:
            first.detail = "reset_twice"
            first.facts.append(("reset", twice))
        if across:
            what, line = across
            findings.insert(0, Finding(f"{what}_axis", (
                f"your kernel takes a {what} over another axis than its operand's last "
                f"(the {what} row above): a softmax's statistics are each row's own, "
                "taken over that row's columns (axis=1, keepdims=True)."),
                facts=first.facts + [(what, line)]))
            first.facts = []
        error.findings = lambda: findings
        raise


def _step(point):
    return "(" + ", ".join(str(int(p)) for p in point) + ")"


def _counts(ran):
    try:
        return ran.counts
    except Exception:   # an uncountable kernel: no evidence either way
        return []


def _unset_reads(ran):
    """(grid point, load) of every scratch read before any store wrote it."""
    return [read for counts in _counts(ran) for read in counts.unset_reads]


def _reset_twice(ran):
    """A fact row's text where a scratch's reset runs at two grid steps of one block
    along the first grid axis (its sum restarts in the middle), else ""."""
    for counts in _counts(ran):
        seen = {}
        for point, eqn in counts.resets:
            steps = seen.setdefault((id(eqn), int(point[0])), [])
            steps.append(point)
            if len(steps) == 2 and len(point) > 1:
                return (f"at grid steps {_step(steps[0])} and {_step(steps[1])}: "
                        f"{line_of(eqn)}")
    return ""


def _max_across_rows(ran, sums=False):
    """("max" or "sum", its line) for the first max (with ``sums``, or sum) a kernel
    takes over another axis than its operand's last; None if none."""
    names = {"reduce_max": "max", **({"reduce_sum": "sum"} if sums else {})}
    for site in getattr(getattr(ran, "program", None), "sites", ()):
        for eqn in jax_equations(site.call.kernel):
            if eqn.primitive.name in names:
                ndim = len(getattr(eqn.invars[0].aval, "shape", ()))
                axes = tuple(eqn.params.get("axes", ()))
                if ndim >= 2 and ndim - 1 not in axes:
                    return names[eqn.primitive.name], line_of(eqn)
    return None


def _narrow(ran):
    """Whether the program holds a bf16 or f16 value (True where unknown)."""
    program = getattr(ran, "program", None)
    if program is None:
        return True
    from ..checking import _narrow_floats
    return _narrow_floats(program.closed.jaxpr)


def _some_blocks(nan, shape, blocks):
    """Whether the NaNs sit in some output blocks and not others."""
    if blocks is None or not nan.any():
        return False
    grid = diagnose._BlockGrid(shape, blocks, None)
    hit = grid.wrong(nan)
    return 0 < hit.sum() < grid.count


def check_returns_two(output, function, names):
    """``function`` returns a pair: ``names`` says which, "(y, inv_rms)"."""
    if not (isinstance(output, (tuple, list)) and len(output) == 2):
        fail("returned", f"{function} returns two arrays: {names}.",
             [("returned", type(output).__name__)])


def check_not_all_inf(output, x, ran=None):
    """Not every value of the two-pass softmax is inf: when the second pass wrote, l was
    0 or m -inf. Where the walk of ``ran`` saw a reset run in both passes, that is said;
    else the causes are asked (a reset in both passes, or statistics never stored
    back)."""
    if np.isinf(np.asarray(output, np.float64)).all():
        facts = [("output", f"{x.size} of {x.size} values are inf")]
        twice = _reset_twice(ran) if ran is not None else ""
        if twice:
            fail("all_inf", (
                "every value of your output is inf: when the second pass wrote, l was 0 "
                "and m -inf, so the statistics of the first pass were gone. Their reset "
                "(the reset row above) runs at j == 0 of both passes: reset m and l only "
                "where phase == 0 too, pl.when((phase == 0) & (j == 0))."),
                facts + [("reset", twice)])
        fail("all_inf", (
            "every value of your output is inf: when the second pass wrote, l was 0 or m "
            "was -inf, as they are before the first fold. Did the first pass store its "
            "new max and sum back into m_scratch and l_scratch at every step (m_new, not "
            "the old m)? Is their reset limited to the first step of the first pass, "
            "pl.when((phase == 0) & (j == 0))?"), facts)


def check_rounded_once(yours, expected, name="output"):
    """A bfloat16 output computed in float32 and cast once, at the store, is the exact
    value rounded once: within half a bf16 step, 2^-8 of each value (0.39%). A
    statistic or a product kept in bf16 rounds several times on the way, and many
    values land a step or more away: too small for the value check, which allows 2% of
    the largest value, but the lesson is float32 until the store."""
    y, e = f64(yours, expected)
    # Plus float32's own rounding, where a sum cancels to near 0 (y = ... + bias).
    off = np.abs(y - e) > 2.0 ** -8 * 1.05 * np.abs(e) + 2.0 ** -20 * np.max(np.abs(e))
    if off.any():
        worst = float(np.max(np.abs(y - e)[off] / np.abs(e)[off]))
        fail("rounded_twice", (
            f"your {name} is bfloat16 rounded more than once: {int(off.sum())} of {off.size} "
            "values are further from the exact value than one rounding allows. Some "
            "intermediate value was bfloat16: compute in float32 (cast the block when you "
            "read it) and cast once, when you store."),
            [("rounding", f"largest error {worst:.2%} of the value · one rounding to bf16: "
                          "at most 0.39%")], name=name)


def check_saves_one_per_row(inv_rms, x):
    """RMSNorm's forward saves 1 / rms, [R, 1], not the normalised rows, [R, D]."""
    R = x.shape[0]
    if np.shape(inv_rms) == x.shape:
        fail("saves_normalised", (
            "your second output is [R, D]: the normalised rows. The backward needs one "
            "number per row, 1 / rms, as a [R, 1] float32 array."),
            [("inv_rms", f"expected {(R, 1)} float32 · yours {np.shape(inv_rms)} "
                         f"{np.asarray(inv_rms).dtype}")])


def check_alone(function, *args, like, **static):
    """function(*args) called without jax.grad runs the custom_vjp's own function, which
    the gradient tests never reach (jax.vjp runs the forward rule): traced here, not run,
    it must return an array of like's shape and dtype."""
    name = getattr(function, "__name__", "the function")
    try:
        alone = jax.eval_shape(functools.partial(function, **static), *args)
    except NotImplementedError:
        raise
    except Exception as error:
        fail("alone", f"{name}() called without jax.grad fails while it is traced.",
             [("raised", raised(error))])
    if getattr(alone, "shape", None) != like.shape or getattr(alone, "dtype", None) != like.dtype:
        fail("alone", (
            f"{name}() called without jax.grad returns something else than under jax.grad: "
            "the function decorated with @jax.custom_vjp must return the output alone, as "
            "its forward rule's first element."),
            [("alone", f"expected {like.shape} {np.dtype(like.dtype).name} · yours "
                       f"{jax.tree_util.tree_map(lambda a: (a.shape, a.dtype.name), alone)}")])


class Saved:
    """What a custom_vjp's forward rule kept for its backward (its residuals), as
    with_grads saw them while it was traced: (shape, dtype) per array."""

    def __init__(self):
        self.arrays = []

    def check(self, *, rows, most, why):
        """At most ``most`` of the saved arrays have ``rows`` elements or more: the
        lesson is that the forward saves what the backward cannot cheaply recompute."""
        big = [(shape, dtype) for shape, dtype in self.arrays if math.prod(shape) >= rows]
        if len(big) > most:
            shown = ", ".join(f"{shape} {np.dtype(dtype).name}" for shape, dtype in self.arrays)
            fail("residuals", (
                f"your forward rule saves {len(big)} arrays as large as the input for the "
                f"backward, where the puzzle's saves {most}: {why}"),
                [("saved", f"the residuals: {shown}")])


def check_saved_rows_used(function, primals, cotangent, *, rows, **static):
    """The backward uses each per-row statistic the forward saved (a float array of one
    value per row of x, ``rows`` rows): jax.vjp run again with that residual doubled in
    every other row, the gradients move. A backward that reads the saved value and
    multiplies it by zero (or selects it away) to compute it again from x does not."""
    _, vjp = jax.vjp(functools.partial(function, **static), *primals)
    leaves, tree = jax.tree_util.tree_flatten(vjp)
    before = [np.asarray(g) for g in jax.tree_util.tree_leaves(vjp(cotangent))]
    for n, leaf in enumerate(leaves):
        shape = getattr(leaf, "shape", ())
        if (not shape or shape[0] != rows or math.prod(shape) != rows
                or not jnp.issubdtype(leaf.dtype, jnp.floating)):
            continue
        every_other = (jnp.arange(rows) % 2 == 0).reshape(shape)
        changed = list(leaves)
        changed[n] = jnp.where(every_other, 2 * leaf, leaf)
        after = jax.tree_util.tree_leaves(jax.tree_util.tree_unflatten(tree, changed)(cotangent))
        if all(np.array_equal(a, np.asarray(b), equal_nan=True) for a, b in zip(before, after)):
            fail("residual_unused", (
                f"your backward does not use the {tuple(shape)} statistic the forward saved: "
                "the kit ran jax.vjp's backward again with those values doubled in every "
                "other row, and every gradient came out the same. Is it read and then "
                "multiplied by zero, or computed again from x? The forward saved it so that "
                "the backward would not recompute it: use the saved value."),
                [("saved", f"residual {n} of the vjp, {tuple(shape)} "
                           f"{np.dtype(leaf.dtype).name}: doubling half of it moves nothing")])


def check_reads_all_of_w(ran, w, *, num_t):
    """Every token block reads all of w: at least ``num_t`` times w's bytes."""
    if ran.bytes_from(w) < num_t * w.nbytes:
        fail("vocabulary_skipped", (
            "some vocabulary blocks of w never reach your kernel: every token block needs "
            "all of w, one (D, block_v) block per step of the vocabulary axis, and your "
            "kernel reads less than that. w's index map must follow the grid's vocabulary "
            "index v (index maps receive the grid's indices in the grid's order, (t, v))."),
            [("w read", f"yours {ran.bytes_from(w):,} bytes · all of w once per token "
                        f"block: {num_t} × {w.nbytes:,} = {num_t * w.nbytes:,} bytes")],
            name="w")


def check_loss_finite(loss, T):
    """No value of the loss is inf: exp overflowed."""
    if np.isinf(np.asarray(loss, np.float64)).any():
        fail("overflow", (
            "your loss is infinite: exp overflowed (float32 exp is inf beyond about 88, and "
            "these logits reach 1e4)."),
            [("loss", f"{int(np.isinf(np.asarray(loss, np.float64)).sum())} of {T} "
                      "values are inf")])


def check_no_vocabulary_array(ran, T, V):
    """No array of T * V elements or more anywhere outside VMEM: not a kernel's operand
    or output, not a JAX op around the kernels; and fewer bytes written to HBM than one
    [T, V] float32 array."""
    for site in ran.program.sites:
        for block in site.call.blocks:
            if math.prod(block.array_shape) >= T * V:
                fail("materialised", (
                    f"{block.name} of your kernel {site.call.name}() is a "
                    f"{tuple(block.array_shape)} array in HBM: as large as the logits. The "
                    "lesson is that no [T, V] array ever leaves VMEM."),
                    [("array", f"{block.name}: {tuple(block.array_shape)} "
                               f"{np.dtype(block.dtype).name} · the logits: ({T}, {V})")])
    for op in ran.program.ops:
        if op.nbytes >= T * V:
            fail("materialised", (
                f"a {op.name} around your kernels moves {op.nbytes:,} bytes: an array as "
                "large as the logits exists in HBM. No [T, V] array may leave VMEM."),
                [("op", f"{op.name}: {op.nbytes:,} bytes · the logits: ({T}, {V})")])
    if ran.traffic.written >= T * V * 4:
        fail("materialised", (
            "your kernels write as many bytes to HBM as one [T, V] float32 array: the "
            "logits (or something as large) went out of VMEM."),
            [("written", f"{ran.traffic.written:,} bytes · one [T, V] float32 array "
                         f"{T * V * 4:,} bytes")])


def check_xent_grids(ran, *, num_t, num_v):
    """cross_entropy's three kernels walk (t, v), (t, v) and (v, t): each sums over its
    last axis."""
    grids = [tuple(site.call.grid) for site in ran.program.sites]
    unit = [tuple(g for g in grid if g != 1) for grid in grids]    # same_grid's terms
    wanted = [(num_t, num_v), (num_t, num_v), (num_v, num_t)]
    if sorted(unit) != sorted(tuple(g for g in grid if g != 1) for grid in wanted):
        fail("grid", (
            "the three kernels' grids are the forward's (token blocks, vocabulary blocks), "
            "dh's the same (it sums over v, last) and dw's (vocabulary blocks, token "
            "blocks) (it sums over t, last)."),
            [("grids", f"expected {(num_t, num_v)}, {(num_t, num_v)}, {(num_v, num_t)} · "
                       f"yours {', '.join(map(str, grids))}")])


def check_label_refused(function, h, w, *, labels, bad, V, **static):
    """function(h, w, labels=labels, **static), with one label (``bad``) outside [0, V),
    raises a ValueError naming labels before any kernel is built (traced, not run: the
    labels are concrete)."""
    try:
        jax.eval_shape(functools.partial(function, labels=labels, **static), h, w)
    except ValueError as error:
        if "labels" in str(error):
            return
        fail("argument_check", "cross_entropy raised a ValueError that does not name "
             "labels.", [("raised", raised(error, kind=False))])
    except NotImplementedError:
        raise
    except Exception as error:
        fail("argument_check", f"cross_entropy with a label of {bad} (V={V}) should raise a "
             "ValueError naming labels before any kernel is built; it failed later, "
             "inside JAX.", [("raised", f"{type(error).__name__}: "
                                        f"{raised(error, kind=False)}")])
    fail("argument_check", f"cross_entropy with a label of {bad} (V={V}) should raise a "
         "ValueError naming labels; it raised nothing.", [("labels", f"labels[3] = {bad}")])


# --- the function measured for a gradient -----------------------------------------

def with_grads(function, arguments, *, saved=None):
    """A function to measure: function(*primals) and its gradients, for args =
    (*primals, cotangent): the cotangent is an argument like the others, an input of
    the measured program. ``arguments`` names its positional arguments, the primals'
    then the cotangent's ("x scale dy"), as the measured function's parameters: checks
    find an operand by its name (``check_blocks(ran, x=...)``).
    saved: a Saved, told what the forward rule kept for the backward."""

    def value_and_grads(*args, **static):
        *primals, cotangent = args
        out, vjp = jax.vjp(functools.partial(function, **static), *primals)
        if saved is not None:   # jax.vjp's function holds the residuals, and nothing else
            saved.arrays += [(tuple(leaf.shape), leaf.dtype) for leaf in
                             jax.tree_util.tree_leaves(vjp) if hasattr(leaf, "shape")]
        try:
            grads = vjp(cotangent)
        except TypeError as error:
            if "Custom VJP bwd rule" not in str(error):
                raise
            trees = re.search(r"output structure (PyTreeDef\(.*?\)) for primal input "
                              r"structure (PyTreeDef\(.*\))", str(error))
            facts = ([("returned", f"{trees[1]} · the function's inputs {trees[2]}")] if trees
                     else [("raised", raised(error, kind=False))])
            fail("vjp_structure", (
                "the backward rule of your custom_vjp function must return a tuple with one "
                "entry per input of the function, in their order (None for an input that "
                "has no gradient, such as integers), and it returns something else."), facts)
        return (out, *grads)

    value_and_grads.__signature__ = inspect.Signature(
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_ONLY) for name in arguments.split()]
        + [inspect.Parameter("static", inspect.Parameter.VAR_KEYWORD)])
    return value_and_grads
