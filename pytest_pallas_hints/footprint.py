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

``vmem`` counts every buffer at its logical size, two per BlockSpec'd operand: what the
lessons' budgets (``check_vmem``) are written in. ``on_chip`` is what the chip lays out,
for ``--cost``: the number of buffers each BlockSpec asks for (``pl.Buffered(n)``), and
every buffer padded to whole tiles. VMEM holds arrays in tiles of 8 sublanes by 128
lanes of 32 bits; a narrower dtype packs 32 / bits rows into a sublane, so a tile is
(16, 128) for bfloat16 and (32, 128) for int8 (the Pallas TPU guide,
https://docs.jax.dev/en/latest/pallas/tpu/details.html, "Array layouts" and "Noteworthy
properties and restrictions": the last two dims of a block are laid out in (8, 128)
tiles). A (block, 1) statistic takes a whole column of tiles: 128 lanes for one.
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


def held(call) -> Footprint:
    """The buffers ``call``'s kernel allocates for itself, in VMEM or HBM: its scratch and
    the ``pl.run_scoped`` buffers alive at once; not the operands it was given, nor
    semaphores or SMEM scalars. What a schedule keeps beside its inputs and outputs
    (a ring: how many blocks it has in flight)."""
    names = _scratch_names(call)
    parts = [(names[n] if n < len(names) else f"scratch {n}", _bytes(aval))
             for n, aval in enumerate(call.scratch) if _in_memory(aval)]
    scoped = _scoped(call.kernel, in_space=_in_memory)
    if scoped:
        parts.append(("pl.run_scoped buffers", scoped))
    return Footprint(call.name, tuple(sorted((p for p in parts if p[1]), key=lambda p: -p[1])))


def _in_memory(aval) -> bool:
    return jaxcompat.memory_space(aval) in ("vmem", "", "default", "any") \
        and hasattr(aval, "shape") and hasattr(aval, "dtype")


LANES, SUBLANES = 128, 8     # a VMEM tile of 32-bit values (see the module docstring)


def on_chip(call) -> Footprint:
    """The VMEM ``call``'s kernel takes on a TPU: ``pl.Buffered`` honoured, every buffer
    padded to whole (8, 128) tiles (sublanes packed for narrow dtypes); for a Mosaic GPU
    kernel, the shared memory (SMEM) of one block: its scratch and scoped buffers."""
    if call.backend == "mosaic_gpu":
        return _shared_memory(call)
    parts = []
    for block in call.blocks:
        if block.space not in ("vmem", "", "default"):
            continue
        shape = tuple(1 if d is None else d for d in block.block_shape)
        count = getattr(block, "buffers", BUFFERS)
        parts.append((f"{block.name} blocks ({count} buffer{'s' if count != 1 else ''})",
                      count * padded(shape, block.dtype)))
    names = _scratch_names(call)
    for n, aval in enumerate(call.scratch):
        if _in_vmem(aval):
            parts.append((names[n] if n < len(names) else f"scratch {n}",
                          padded(tuple(aval.shape), aval.dtype)))
    scoped = _scoped(call.kernel, padded)
    if scoped:
        parts.append(("pl.run_scoped buffers", scoped))
    return Footprint(call.name, tuple(sorted(parts, key=lambda p: -p[1])))


def _shared_memory(call) -> Footprint:
    names = _scratch_names(call)
    parts = [(names[n] if n < len(names) else f"scratch {n}", _bytes(aval))
             for n, aval in enumerate(call.scratch) if _in_smem(aval)]
    scoped = _scoped(call.kernel, in_space=_in_smem)
    if scoped:
        parts.append(("scoped buffers (pipelines' slots)", scoped))
    return Footprint(call.name, tuple(sorted(parts, key=lambda p: -p[1])))


def _in_smem(aval) -> bool:
    return jaxcompat.memory_space(aval) == "smem" and hasattr(aval, "shape") \
        and hasattr(aval, "dtype") and "barrier" not in str(aval.dtype).lower()


def padded(shape: tuple, dtype) -> int:
    """Bytes of an array of ``shape`` in VMEM: its last dim padded to 128 lanes, the one
    before to 8 sublanes times the values a 32-bit sublane packs (2 for bfloat16, 4 for
    int8, 8 for int4); a 1-D array is one row."""
    try:
        bits = int(np.dtype(dtype).itemsize * 8)
    except TypeError:
        return 0
    bits = 4 if "int4" in str(dtype) else bits
    shape = tuple(int(d) for d in shape) or (1,)
    rows, cols = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, shape[-1])
    lead = int(np.prod(shape[:-2], dtype=np.int64)) if len(shape) > 2 else 1
    pack = SUBLANES * max(32 // bits, 1)
    rows, cols = -(-rows // pack) * pack, -(-cols // LANES) * LANES
    return lead * rows * cols * bits // 8


def _scoped(jaxpr, size=None, in_space=None) -> int:
    """The most VMEM (or the memory ``in_space`` picks) that run_scoped allocations
    hold at one moment inside ``jaxpr``."""
    in_space = in_space or _in_vmem
    most = 0
    for eqn in jaxpr.eqns:
        view = jaxcompat.control(eqn)
        if isinstance(view, jaxcompat.Scoped):
            inner, _ = view.body
            mine = sum((size(v.aval.shape, v.aval.dtype) if size else _bytes(v.aval))
                       for v in inner.invars if in_space(v.aval))
            most = max(most, mine + _scoped(inner, size, in_space))
        else:
            for inner, _ in jaxcompat.parts(eqn):
                most = max(most, _scoped(inner, size, in_space))
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
