"""Products written elementwise: a matmul done on the vector units.

``jnp.sum(a[:, :, None] * b[None, :, :], axis=1)`` is ``a @ b``, computed with one
multiply per (i, k, j) on the VPU, where the MXU (the lesson) would have done it in one
``dot``. What gives it away is the multiply, read from how each operand was made
(broadcast, reshaped, cast):

* an outer product: each operand repeats its values along a dimension where the other
  varies, so every output element is the product of one element of each input
  (``a[:, :, None] * b[None, :, :]``, or ``a[:, k:k + 1] * b[k:k + 1, :]`` summed in a loop);
* a product summed like a dot: one operand repeats along a dimension where the other
  varies, and the result is summed over a dimension where both vary
  (``jnp.sum(x[:, None] * m, axis=0)``, a vector times a matrix).

A scale or a mask (``x * rstd[:, None]``) is neither, and neither is a row's own dot
product (``jnp.sum(g * x_hat, axis=1)``: nothing repeats). ``outer_muls(jaxpr)`` finds
them; the walks count their elements as they run (``walk.Counts.outer``), loops and
grids included, so that a kernel that mixes the MXU's dot into a VPU product, at any
share, shows what did the work.
"""
from __future__ import annotations

import functools

from . import jaxcompat

_SAME_LAYOUT = {"convert_element_type", "copy", "copy_p", "neg", "reduce_precision",
                "optimization_barrier"}


@functools.lru_cache(maxsize=512)
def outer_muls(jaxpr) -> frozenset[int]:
    """ids of ``jaxpr``'s own float ``mul`` equations that are outer products, or
    products summed like a dot (the module's text)."""
    made = {v: eqn for eqn in jaxpr.eqns for v in eqn.outvars}
    users: dict = {}
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            if not jaxcompat.is_literal(v):
                users.setdefault(v, []).append(eqn)
    found = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name != "mul" or len(eqn.invars) != 2:
            continue
        aval = getattr(eqn.outvars[0], "aval", None)
        if aval is None or "float" not in str(getattr(aval, "dtype", "")):
            continue
        shape = aval.shape
        a, b = (repeats(v, made) | _stretched(v, shape) for v in eqn.invars)
        if any(shape[d] > 1 for d in a - b) and any(shape[d] > 1 for d in b - a):
            found.add(id(eqn))
        elif any(shape[d] > 1 for d in a ^ b) and any(
                shape[d] > 1 and d not in a | b for d in _summed(eqn.outvars[0], users)):
            found.add(id(eqn))
    return frozenset(found)


def _stretched(var, shape) -> frozenset[int]:
    """Dimensions of size 1 in ``var`` that an operation of ``shape`` stretches (newer
    JAX multiplies (8, 1) by (1, 128) without a broadcast between)."""
    mine = getattr(getattr(var, "aval", None), "shape", None)
    if mine is None or len(mine) != len(shape):
        return frozenset()
    return frozenset(d for d, n in enumerate(mine) if n == 1 and shape[d] != 1)


def _summed(var, users: dict, depth: int = 0) -> set[int]:
    """The dimensions a ``reduce_sum`` sums ``var`` over, through casts."""
    axes = set()
    for eqn in users.get(var, ()):
        name = eqn.primitive.name
        if name == "reduce_sum":
            axes |= set(eqn.params.get("axes", ()))
        elif name in _SAME_LAYOUT and depth < 16:
            axes |= _summed(eqn.outvars[0], users, depth + 1)
    return axes


def repeats(var, made: dict, depth: int = 0) -> frozenset[int]:
    """The dimensions along which ``var``'s values repeat, as far as the equations that
    made it show: those a broadcast added or stretched from size 1, kept through casts
    and through reshapes that only add or drop dimensions of size 1."""
    eqn = None if jaxcompat.is_literal(var) else made.get(var)
    if eqn is None or depth > 16:
        return frozenset()
    name = eqn.primitive.name
    if name in _SAME_LAYOUT:
        return repeats(eqn.invars[0], made, depth + 1)
    source = getattr(eqn.invars[0], "aval", None)
    if source is None or not hasattr(source, "shape"):
        return frozenset()
    if name == "broadcast_in_dim":
        shape, dims = eqn.params["shape"], eqn.params["broadcast_dimensions"]
        inner = repeats(eqn.invars[0], made, depth + 1)
        out = {d for d in range(len(shape)) if d not in dims}
        out |= {d for i, d in enumerate(dims)
                if i in inner or (source.shape[i] == 1 and shape[d] != 1)}
        return frozenset(out)
    if name == "reshape":
        shape = eqn.outvars[0].aval.shape
        kept = [d for d, n in enumerate(source.shape) if n != 1]
        placed = [d for d, n in enumerate(shape) if n != 1]
        if [source.shape[d] for d in kept] != [shape[d] for d in placed]:
            return frozenset()
        where = dict(zip(kept, placed))
        inner = repeats(eqn.invars[0], made, depth + 1)
        return frozenset(where[d] for d in inner if d in where)
    return frozenset()
