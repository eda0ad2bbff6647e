"""VMEM a kernel takes, from every allocation it makes.

A TPU core has a few tens of MiB of VMEM, and every buffer of a kernel lives
there at once: what a lesson about moving data by hand must count is not only
``scratch_shapes`` but

* each BlockSpec'd operand in VMEM: two buffers of one block (the pipeline
  fetches block i + 1 while the kernel works on block i);
* each VMEM scratch buffer;
* the ``pl.run_scoped`` buffers alive at the same moment (the largest nesting of
  them anywhere in the kernel; ``pltpu.emit_pipeline`` allocates its buffers
  this way too).

SMEM, semaphores and operands left in HBM (``pl.ANY``) take no VMEM.
"""
from __future__ import annotations

import dataclasses

from .frozen import np

from . import jaxcompat

BUFFERS = 2   # per BlockSpec'd operand: the pipeline's double buffering


@dataclasses.dataclass(frozen=True)
class Footprint:
    kernel: str
    parts: tuple[tuple[str, int], ...]    # (what, bytes), largest first

    @property
    def total(self) -> int:
        return sum(size for _, size in self.parts)

    def largest(self, count: int = 3) -> str:
        """'k_vmem 64 KiB · acc 32 KiB · q blocks (2 buffers) 16 KiB'."""
        return " · ".join(f"{what} {_size(size)}" for what, size in self.parts[:count])


def vmem(call) -> Footprint:
    """The VMEM ``call``'s kernel allocates (a ``jaxcompat.KernelCall``)."""
    parts = []
    for block in call.blocks:
        if block.space not in ("vmem", "", "default"):   # default: VMEM on a TPU
            continue
        elements = int(np.prod([1 if d is None else d for d in block.block_shape],
                               dtype=np.int64))
        parts.append((f"{block.name} blocks ({BUFFERS} buffers)",
                      BUFFERS * elements * np.dtype(block.dtype).itemsize))
    names = _scratch_names(call)
    for n, aval in enumerate(call.scratch):
        if _in_vmem(aval):
            parts.append((names[n] if n < len(names) else f"scratch {n}", _bytes(aval)))
    scoped = _scoped(call.kernel)
    if scoped:
        parts.append(("pl.run_scoped buffers", scoped))
    return Footprint(call.name, tuple(sorted(parts, key=lambda p: -p[1])))


def _scoped(jaxpr) -> int:
    """The most VMEM that run_scoped allocations hold at one moment inside ``jaxpr``."""
    most = 0
    for eqn in jaxpr.eqns:
        view = jaxcompat.control(eqn)
        if isinstance(view, jaxcompat.Scoped):
            inner, _ = view.body
            mine = sum(_bytes(v.aval) for v in inner.invars if _in_vmem(v.aval))
            most = max(most, mine + _scoped(inner))
        else:
            for inner, _ in jaxcompat.parts(eqn):
                most = max(most, _scoped(inner))
    return most


def _scratch_names(call) -> list[str]:
    names = getattr(getattr(call.kernel, "debug_info", None), "arg_names", None) or ()
    first = call.num_prefetch + len(call.blocks)
    return [str(n) for n in list(names)[first:]]


def _in_vmem(aval) -> bool:
    return jaxcompat.memory_space(aval) in ("vmem", "", "default") and hasattr(aval, "shape") \
        and hasattr(aval, "dtype") and "sem" not in str(aval.dtype).lower()


def _bytes(aval) -> int:
    try:
        itemsize = np.dtype(aval.dtype).itemsize
    except TypeError:   # a semaphore or another dtype of Pallas's own
        return 0
    return int(np.prod(aval.shape, dtype=np.int64)) * itemsize


def _size(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):.3g} MiB" if nbytes >= 1 << 20 else (
        f"{nbytes / 1024:.3g} KiB" if nbytes >= 1024 else f"{nbytes} B")
