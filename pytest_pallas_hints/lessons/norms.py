"""The norms chapter's lesson machinery: what exercises/test_norms.py knows about
row statistics beyond the right answers.

* Budgets: the VMEM a row kernel may spend on per-row statistics
  (``lane_statistics``) and the flops of the fused cross-entropy's dots
  (``xent_flops``).
* Models of known wrong answers, in float64 NumPy: the online softmax with its
  statistics not rescaled or reset at every block (``online64``), LayerNorm with an
  unbiased variance (``layer_norm64(ddof=1)``), the cross-entropy of one vocabulary
  block or without its label term (``xent64``), per-block partial sums (``row_blocks``).
* Checks that word a learner's sentence: a bf16 output rounded once
  (``check_rounded_once``), a custom_vjp function called alone (``check_alone``), what
  a forward rule saves (``Saved``), no [T, V] array outside VMEM
  (``check_no_vocabulary_array``).
* ``with_grads``: a function and its gradients through jax.vjp, as one program to
  measure, its arguments named (a backward rule's wrong output structure named).
"""
import functools
import inspect
import math
import re

import jax

from ..checking import fail
from ..frozen import np
from .common import cdiv, f64


def lane_statistics(block_rows):
    """VMEM a kernel may spend on per-row statistics: two (block_rows, 128) float32
    buffers (one float per row, or a row of 128 lanes as TPU kernels often keep)."""
    return 2 * block_rows * 128 * 4


def xent_flops(T, D, V, block_t, block_v, dots):
    """Flops of `dots` (block_t x D) @ (D x block_v)-sized dots per (token block,
    vocabulary block) pair."""
    return cdiv(T, block_t) * cdiv(V, block_v) * dots * 2 * block_t * D * block_v


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


def layer_norm64(x, scale, bias, dy, eps, *, ddof=0):
    x, scale, bias, dy = f64(x, scale, bias, dy)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).sum(axis=1, keepdims=True) / (x.shape[1] - ddof)
    rstd = 1 / np.sqrt(var + eps)
    x_hat = (x - mean) * rstd
    g = dy * scale
    dx = rstd * (g - g.mean(axis=1, keepdims=True) - x_hat * (g * x_hat).mean(axis=1,
                                                                               keepdims=True))
    return dict(y=x_hat * scale + bias, dx=dx, dscale=(dy * x_hat).sum(axis=0),
                dbias=dy.sum(axis=0), mean=mean, rstd=rstd, x_hat=x_hat, g=g)


def xent64(h, w, labels, dloss=None, *, blocks=None):
    """loss [T], lse [T] and, with dloss, dh and dw of cross_entropy, in float64.
    blocks=(first, stop): the statistics of vocabulary columns [first, stop) only (a
    logsumexp over one block; the label's logit counts only if it lies there)."""
    h, w = f64(h, w)
    logits = h @ w
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


def check_rounded_once(yours, expected, name="output"):
    """A bfloat16 output computed in float32 and cast once, at the store, is the exact
    value rounded once: within half a bf16 step, 2^-8 of each value (0.39%). A
    statistic or a product kept in bf16 rounds several times on the way, and many
    values land a step or more away: too small for the value check, which allows 2% of
    the largest value, but the lesson is float32 until the store."""
    y, e = f64(yours, expected)
    off = np.abs(y - e) > 2.0 ** -8 * 1.05 * np.abs(e)
    if off.any():
        worst = float(np.max(np.abs(y - e)[off] / np.abs(e)[off]))
        fail("rounded_twice", (
            f"your {name} is bfloat16 rounded more than once: {int(off.sum())} of {off.size} "
            "values are further from the exact value than one rounding allows. Some "
            "intermediate value was bfloat16: compute in float32 (cast the block when you "
            "read it) and cast once, when you store."),
            [("rounding", f"largest error {worst:.2%} of the value · one rounding to bf16: "
                          "at most 0.39%")], name=name)


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
             [("raised", f"{type(error).__name__}: {str(error).splitlines()[0][:200]}")])
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
                     else [("raised", str(error).splitlines()[0][:200])])
            fail("vjp_structure", (
                "the backward rule of your custom_vjp function must return a tuple with one "
                "entry per input of the function, in their order (None for an input that "
                "has no gradient, such as integers), and it returns something else."), facts)
        return (out, *grads)

    value_and_grads.__signature__ = inspect.Signature(
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_ONLY) for name in arguments.split()]
        + [inspect.Parameter("static", inspect.Parameter.VAR_KEYWORD)])
    return value_and_grads
