"""Bytes a kernel moves between HBM and VMEM: what makes most kernels fast or slow.

``count(executed)`` sums, over every run of every ``pallas_call`` of one
program run (``program.execute``), the traffic a TPU's pipeline would cause:

* an input block is copied HBM -> VMEM at the first grid step and whenever
  its block index differs from the previous step's (grid steps in row-major
  order, the last axis fastest), so a block that stays put is fetched once;
* an output block is copied VMEM -> HBM whenever its index is about to
  change, and at the last step;
* index maps are evaluated on the scalar-prefetch values that run got; the
  prefetch operands themselves are not counted;
* operands left in HBM (``memory_space=pl.ANY``) count only what the
  kernel's own DMAs (``pltpu.make_async_copy``) move, each DMA the kernel
  starts, at every grid step (``walk.kernel_counts``).

A block that hangs off the end of its array counts only its in-bounds part.

Work done outside any kernel (plain JAX ops around the ``pallas_call``) is
counted apart, in ``outside``: every such op reads its operands and writes its
result (reshapes are free), an upper bound that makes an unfused step visible.
"""
from __future__ import annotations

import dataclasses

from .frozen import np

from . import walk
from .structure import FREE

MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Operand:
    kernel: str
    name: str
    direction: str     # "read" (HBM -> VMEM) or "written" (VMEM -> HBM)
    bytes: int
    array_bytes: int   # the size of the whole array, for "read 4 times"
    copies: int
    site: int = -1     # which pallas_call of the program, and which of its operands
    operand: int = -1  # (prefetch operands first); -1 for a kernel's DMAs summed by direction


@dataclasses.dataclass(frozen=True)
class Traffic:
    read: int                          # HBM -> VMEM, by the kernels
    written: int                       # VMEM -> HBM, by the kernels
    operands: tuple[Operand, ...] = ()
    outside: int = 0                   # bytes read and written by JAX ops outside kernels
    outside_ops: tuple[Operand, ...] = ()
    output: object = None              # what the function returned

    @property
    def total(self) -> int:
        return self.read + self.written

    def __str__(self) -> str:
        return f"{mib(self.read)} read, {mib(self.written)} written"


def mib(*sizes: int) -> str | list[str]:
    """Byte counts in one unit (MiB, or KiB when all are small): '3.1 MiB'."""
    unit, name = (MiB, "MiB") if max(sizes) >= MiB // 4 else (1024, "KiB")
    shown = [f"{n / unit:.3g} {name}" for n in sizes]
    return shown[0] if len(shown) == 1 else shown


def count(program, executed: list, steps: list, output=None) -> Traffic:
    """The traffic of one run: ``executed`` from ``program.execute``, ``steps`` the
    ``walk.kernel_counts`` of each executed kernel."""
    operands: list[Operand] = []
    for run, counted in zip(executed, steps):
        operands += _pipelined(run.site.call, run.prefetch, run.site.index)
        operands += _dmas(run.site.call, counted, run.site.index)
    moved: dict[str, int] = {}
    for op in program.ops:
        moved[op.name] = moved.get(op.name, 0) + op.nbytes
    outside = [Operand(kernel="outside kernels", name=name, direction="read+written",
                       bytes=size, array_bytes=size, copies=1) for name, size in moved.items()
               if name not in FREE]
    return Traffic(read=sum(o.bytes for o in operands if o.direction == "read"),
                   written=sum(o.bytes for o in operands if o.direction == "written"),
                   operands=tuple(operands), outside=sum(o.bytes for o in outside),
                   outside_ops=tuple(outside), output=output)


def _pipelined(call, prefetch: list, site: int = -1) -> list[Operand]:
    """The BlockSpec traffic of one kernel run, from its grid and index maps."""
    steps = walk.grid_steps(call.grid)
    operands = []
    for position, block in enumerate(call.blocks, call.num_prefetch):
        if block.space in ("any", "semaphore", "semaphore_mem"):
            continue
        starts, sizes = _windows(block, steps, prefetch)
        moved = (starts != np.roll(starts, 1, axis=0)).any(axis=1)  # a new block this step
        if block.is_input:
            moved[0] = True
        else:  # written back before the index changes, and at the end
            moved = np.roll(moved, -1)
            moved[-1] = True
        shape = np.asarray(block.array_shape)
        in_bounds = np.clip(np.minimum(sizes, shape - starts), 0, None).prod(axis=1)
        itemsize = np.dtype(block.dtype).itemsize
        operands.append(Operand(
            kernel=call.name, name=block.name, direction="read" if block.is_input else "written",
            bytes=int(in_bounds[moved].sum()) * itemsize,
            array_bytes=int(shape.prod()) * itemsize, copies=int(moved.sum()),
            site=site, operand=position))
    return operands


def _windows(block, steps: np.ndarray, prefetch: list) -> tuple[np.ndarray, np.ndarray]:
    """Start offsets and sizes of ``block``'s window at every grid step."""
    indices = walk.index_maps(block, steps, prefetch)
    starts, sizes = [], []
    for d, size in enumerate(block.block_shape):
        if size is None:                      # squeezed: one element, indexed directly
            starts.append(indices[:, d])
            sizes.append(1)
        elif d in block.element_dims:         # the index is an element offset
            starts.append(indices[:, d])
            sizes.append(size)
        else:
            starts.append(indices[:, d] * size)
            sizes.append(size)
    return np.stack(starts, axis=1), np.broadcast_to(sizes, (len(steps), len(sizes)))


def _dmas(call, counted, site: int = -1) -> list[Operand]:
    """The kernel's own DMAs, summed by direction."""
    off_chip = ("any", "hbm")
    totals: dict[tuple[str, str], list[int]] = {}
    for source, target, nbytes in counted.dmas:
        direction = ("read" if source in off_chip and target not in off_chip else
                     "written" if target in off_chip and source not in off_chip else "copied")
        entry = totals.setdefault((f"{source or 'vmem'} -> {target or 'vmem'}", direction),
                                  [0, 0])
        entry[0] += nbytes
        entry[1] += 1
    return [Operand(kernel=call.name, name=f"DMA {name}", direction=direction, bytes=nbytes,
                    array_bytes=nbytes, copies=copies, site=site)
            for (name, direction), (nbytes, copies) in totals.items()]
