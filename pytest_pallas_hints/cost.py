"""What a kernel would cost on a real TPU, from what the kit counted of its run.

A roofline: a kernel takes at least as long as its matmul work at the chip's peak
rate, and at least as long as its traffic between HBM and VMEM at the chip's
bandwidth; the larger of the two is a lower bound on its time, and names what
bounds it (compute or memory). Arithmetic intensity (flops per byte moved) says
which side of the ridge a kernel sits on.

Everything comes from the one measured run (``checking.Measured``): the dot flops
the walker counted (a skipped block counts zero), the elements of the other work
(the vector units' share, shown, not in the bound), the bytes of every BlockSpec
copy and DMA (``traffic``) and the VMEM of every allocation (``footprint``). So the
figures are the same for two kernels that do the same work, and differ exactly
where the work differs (a causal flash against a dense one).

The chips' figures, one table with the sources:

* peak bf16 and int8 rates and HBM bandwidth, per chip: Google Cloud's TPU pages,
  https://cloud.google.com/tpu/docs/v5e (197 TFLOP/s bf16, 394 TOP/s int8,
  819 GB/s) and https://cloud.google.com/tpu/docs/v6e (918 TFLOP/s bf16,
  1836 TOP/s int8, 1640 GB/s); the same figures are in JAX's own table,
  jax/_src/tpu_info.py (``get_tpu_info_for_chip``);
* VMEM: 128 MiB per core on both (jax/_src/tpu_info.py); what a kernel gets
  without asking (``pltpu.CompilerParams(vmem_limit_bytes=...)``) is the Mosaic
  compiler's default scoped limit, 16 MiB on v5e and 32 MiB on v6e (the Pallas TPU
  docs, https://docs.jax.dev/en/latest/pallas/tpu/pipelining.html, "TPUs and
  VMEM").

An f32 dot is priced at the bf16 rate: at the default precision a TPU rounds its
inputs to bf16 (HIGHEST takes several passes, so the bound is a lower bound).
"""
from __future__ import annotations

import dataclasses

from . import footprint

MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str
    bf16: float          # peak dense bf16 FLOP/s
    int8: float          # peak int8 OP/s
    hbm: float           # HBM bandwidth, bytes/s
    vmem: int            # VMEM per core, bytes
    scoped: int          # VMEM a kernel gets by default (the compiler's scoped limit)


CHIPS = {
    "v5e": Chip("TPU v5e", bf16=197e12, int8=394e12, hbm=819e9, vmem=128 * MiB, scoped=16 * MiB),
    "v6e": Chip("TPU v6e", bf16=918e12, int8=1836e12, hbm=1640e9, vmem=128 * MiB,
                scoped=32 * MiB),
}


@dataclasses.dataclass(frozen=True)
class KernelCost:
    kernel: str
    dot_flops: dict           # operand dtype -> flops of the dots the kernel executed
    elementwise: int          # elements produced by the rest of its work
    bytes: int                # HBM <-> VMEM, both ways
    vmem: footprint.Footprint

    @property
    def flops(self) -> int:
        return sum(self.dot_flops.values())

    @property
    def intensity(self) -> float:
        """Flops per byte moved (inf when nothing moved)."""
        return self.flops / self.bytes if self.bytes else float("inf")

    def compute_seconds(self, chip: Chip) -> float:
        return sum(flops / (chip.int8 if "int" in dtype else chip.bf16)
                   for dtype, flops in self.dot_flops.items())

    def bound(self, chip: Chip) -> tuple[float, str]:
        """(a lower bound on the time, "compute-bound" or "memory-bound")."""
        compute, memory = self.compute_seconds(chip), self.bytes / chip.hbm
        return (compute, "compute-bound") if compute > memory else (memory, "memory-bound")

    def line(self, chip: Chip) -> str:
        """'on TPU v5e: >= 41 µs (memory-bound, 12 flop/B), VMEM 3.1 of 16 MiB'."""
        seconds, kind = self.bound(chip)
        return (f"on {chip.name}: >= {duration(seconds)} ({kind}, {self._per_byte()}), "
                f"VMEM {footprint._size(self.vmem.total)} of {chip.scoped // MiB} MiB")

    def warning(self, chip: Chip) -> str:
        """'' when the kernel fits; else what does not fit, and the blocks that take most."""
        total = self.vmem.total
        if total <= chip.scoped:
            return ""
        where = ("more than the chip's VMEM" if total > chip.vmem else
                 f"more than the {chip.scoped // MiB} MiB a kernel gets by default (raise "
                 "vmem_limit_bytes in pltpu.CompilerParams, or take smaller blocks)")
        return (f"{self.kernel}() needs {total / MiB:.3g} MiB of VMEM on {chip.name}, {where}: "
                f"{self.vmem.largest()}")

    def _per_byte(self) -> str:
        return "no HBM traffic" if not self.bytes else f"{self.intensity:.3g} flop/B"

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "dot_flops": dict(self.dot_flops),
                "elementwise": self.elementwise, "bytes": self.bytes,
                "vmem": [self.vmem.kernel, [list(p) for p in self.vmem.parts]]}

    @classmethod
    def from_dict(cls, data: dict) -> "KernelCost":
        name, parts = data["vmem"]
        return cls(data["kernel"], dict(data["dot_flops"]), data["elementwise"], data["bytes"],
                   footprint.Footprint(name, tuple((what, size) for what, size in parts)))


def of(measured) -> list[KernelCost]:
    """The cost of every kernel run of one measured program."""
    costs = []
    for run, counts in zip(measured.executed, measured.counts):
        moved = sum(op.bytes for op in measured.traffic.operands
                    if op.site == run.site.index and op.direction in ("read", "written"))
        costs.append(KernelCost(run.site.call.name, dict(counts.dot_flops), counts.elementwise,
                                moved, measured.vmem[run.site.index]))
    return costs


def summary(costs: list[KernelCost]) -> list[str]:
    """The line a solved performance puzzle prints: the run's kernels together, on v5e,
    with v6e's bound beside it, and a warning for what does not fit."""
    if not costs:
        return []
    total = KernelCost(", ".join(dict.fromkeys(c.kernel for c in costs)),
                       _add(c.dot_flops for c in costs), sum(c.elementwise for c in costs),
                       sum(c.bytes for c in costs), max((c.vmem for c in costs),
                                                        key=lambda f: f.total))
    v5e, v6e = CHIPS["v5e"], CHIPS["v6e"]
    lines = [f"{total.line(v5e)} · on TPU v6e: >= {duration(total.bound(v6e)[0])}"]
    lines += [w for c in costs for w in [c.warning(v5e)] if w]
    return lines


def table(rows: list[tuple[str, KernelCost]]) -> list[str]:
    """--cost: per kernel run, (label, cost) each, a line of its label and a line of
    figures."""
    lines = [f"  {'kernel':<22}{'MXU flops':>12}{'vector':>10}{'HBM bytes':>12}{'flop/B':>8}"
             f"{'VMEM':>11}{'v5e':>10}{'v6e':>10}"]
    for label, c in rows:
        v5e, v6e = (c.bound(CHIPS[k]) for k in ("v5e", "v6e"))
        lines.append(label)
        lines.append(f"  {c.kernel[:21]:<22}{c.flops:>12,}{c.elementwise:>10,}{c.bytes:>12,}"
                     f"{c.intensity:>8.3g}{footprint._size(c.vmem.total):>11}"
                     f"{duration(v5e[0]):>10}{duration(v6e[0]):>10}")
        lines += [f"  ! {w}" for w in (c.warning(CHIPS["v5e"]),) if w]
    lines.append("bounds: the larger of MXU flops at the chip's peak and HBM bytes at its "
                 "bandwidth, a lower bound (sources: pytest_pallas_hints/cost.py)")
    return lines


def duration(seconds: float) -> str:
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _add(dicts) -> dict:
    out: dict = {}
    for d in dicts:
        for key, value in d.items():
            out[key] = out.get(key, 0) + value
    return out
