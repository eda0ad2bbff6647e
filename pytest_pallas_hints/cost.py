"""What a kernel would cost on a real chip, from what the kit counted of its run.

A roofline with the parts a learner can act on. A kernel takes at least

* its dots at the MXU's rate (``mxu``): each dot priced by its operands' dtypes
  (bf16, int8, fp8 have their own rates), its precision (a float32 dot at HIGHEST
  takes 6 bf16 passes, at HIGH 3) and its shape, padded to the MXU's tile (a 2-row
  dot leaves most of a 128 x 128 MXU idle, and pays for it);
* its other work at the vector unit's rate (``vector``): every element an
  operation produces on the VPU, exp, log, tanh and the like on the EUP;
* its traffic between HBM and VMEM at the HBM bandwidth (``memory``);
* a fixed overhead per grid step (``overhead``): the pipeline's bookkeeping, paid
  by a step that does nothing too.

The core runs its steps one after another (dots and vector work overlap each other,
the step overhead adds to them), while the DMA engines copy beside it: the bound is
the larger of the core's time and the memory time, and names what bounds it
(compute, vector, overhead or memory). The ridge is the intensity (MXU flops per byte)
above which a kernel of bf16 dots leaves memory behind.

Everything comes from one measured run (``checking.Measured``) or, for ``--cost``, a
projection of it to the test's TPU-size configuration (``project``: the index maps and
the integer walk at that size, nothing of the kernel's arithmetic run). Bytes per
operand are shown against the minimum each must move: its whole array once.

The chips' figures, with their public sources:

* TPU v5e: 197 TFLOP/s bf16, 394 TOP/s int8, 819 GB/s HBM, 4 MXUs of 128 x 128 per
  TensorCore: https://cloud.google.com/tpu/docs/v5e and
  https://cloud.google.com/tpu/docs/system-architecture-tpu-vm (also JAX's own table,
  ``jax.experimental.pallas.tpu.get_tpu_info_for_chip``);
* TPU v6e: 918 TFLOP/s bf16, 1836 TOP/s int8, 1640 GB/s, MXUs of 256 x 256:
  https://cloud.google.com/tpu/docs/v6e;
* neither page gives an int4 or fp8 rate: int4 and fp8 operands are priced at the int8
  rate (the MXU takes them packed; their bytes count at their packed size);
* VMEM: 128 MiB per core (``pltpu.get_tpu_info_for_chip``); what a kernel gets without asking
  (``pltpu.CompilerParams(vmem_limit_bytes=...)``) is the compiler's scoped default,
  16 MiB on v5e and 32 MiB on v6e (the Pallas TPU pipelining guide,
  https://docs.jax.dev/en/latest/pallas/tpu/pipelining.html, "TPUs and VMEM");
* precision: ``jax.lax.Precision``'s documentation (DEFAULT: bf16, HIGH: 3 bf16
  passes, HIGHEST: 6), https://docs.jax.dev/en/latest/jax.lax.html#jax.lax.Precision;
* the vector unit: a VPU operates on (8, 128) vregs with 4 ALUs per lane, the EUP
  (exp, log, tanh...) on one vreg per cycle (the TPU chapter of "How to Scale Your
  Model", https://jax-ml.github.io/scaling-book/tpus/); the clock is not published
  for either chip, so it is derived: v5e's 197 TFLOP/s over 4 MXUs of 128 x 128 MACs
  is 1.5 GHz; v6e's 918 over 4 of 256 x 256 is 1.75 GHz. An estimate, said so in the
  table;
* per grid step, about 0.35 µs: the Pallas TPU matmul guide's figure for the
  pipeline's fixed cost per step,
  https://docs.jax.dev/en/latest/pallas/tpu/matmul.html ("Performance of pipelined
  kernels");
* NVIDIA H100 SXM5 (the hopper chapter's Mosaic GPU kernels): 989 TFLOP/s dense bf16,
  1979 dense fp8 and int8, 494 TF32 (a float32 dot at the default precision), 67
  TFLOP/s float32 without tensor cores, 3.35 TB/s HBM3 (the H100 datasheet,
  https://www.nvidia.com/en-us/data-center/h100/, figures without sparsity); shared
  memory 228 KiB per SM, at most 227 KiB per block (the Hopper tuning guide,
  https://docs.nvidia.com/cuda/hopper-tuning-guide/, "Shared memory"); exp and the
  other special functions 16 per SM per cycle (the CUDA C++ programming guide,
  "Arithmetic instructions"), 132 SMs at 1.98 GHz; a wgmma's M is 64 rows per warpgroup.
  A block of a GPU grid runs beside the others: no step overhead is charged.
"""
from __future__ import annotations

import dataclasses
import math

from . import footprint

MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str
    rates: dict          # operand class ("bf16", "int8", "tf32"...) -> peak dense op/s
    hbm: float           # HBM bandwidth, bytes/s
    vmem: int            # on-chip memory a kernel's buffers share (VMEM; SMEM per SM)
    scoped: int          # what a kernel gets by default (the compiler's scoped limit)
    mxu: int             # the MXU's tile edge: K and N of a dot pad to it (0: none)
    rows: int            # the rows a dot's M pads to (a sublane group; a wgmma's 64)
    vector: float        # elements/s of element-wise work
    transcendental: float   # elements/s of exp, log, tanh...
    step: float          # seconds of fixed overhead per grid step
    memory: str = "VMEM"
    estimated: tuple = ("vector",)   # figures derived, not published
    unit: str = "MXU"    # what runs the dots

    @property
    def bf16(self) -> float:
        return self.rates["bf16"]

    @property
    def int8(self) -> float:
        return self.rates["int8"]

    @property
    def ridge(self) -> float:
        """Flops per byte above which bf16 dots, not HBM, bound a kernel."""
        return self.bf16 / self.hbm


_V5E_CLOCK = 197e12 / (4 * 128 * 128 * 2)     # 1.5 GHz, derived (see above)
_V6E_CLOCK = 918e12 / (4 * 256 * 256 * 2)     # 1.75 GHz, derived
_VREG = 8 * 128

CHIPS = {
    "v5e": Chip("TPU v5e", {"bf16": 197e12, "int8": 394e12}, hbm=819e9, vmem=128 * MiB,
                scoped=16 * MiB, mxu=128, rows=8, vector=4 * _VREG * _V5E_CLOCK,
                transcendental=_VREG * _V5E_CLOCK, step=0.35e-6),
    "v6e": Chip("TPU v6e", {"bf16": 918e12, "int8": 1836e12}, hbm=1640e9, vmem=128 * MiB,
                scoped=32 * MiB, mxu=256, rows=8, vector=4 * _VREG * _V6E_CLOCK,
                transcendental=_VREG * _V6E_CLOCK, step=0.35e-6),
    "h100": Chip("H100", {"bf16": 989e12, "int8": 1979e12, "fp8": 1979e12, "tf32": 494e12,
                        "fp32": 67e12},
                 hbm=3.35e12, vmem=228 * 1024, scoped=227 * 1024, mxu=0, rows=64,
                 vector=67e12, transcendental=16 * 132 * 1.98e9, step=0.0, memory="SMEM",
                 estimated=(), unit="tensor cores"),
}
TPUS = ("v5e", "v6e")


def chips_for(backend: str) -> tuple[str, ...]:
    """The chips a kernel is priced on: H100 for a Mosaic GPU kernel, else the TPUs."""
    return ("h100",) if backend == "mosaic_gpu" else TPUS


def operand_class(dtypes, precision: str, chip: Chip) -> tuple[str, int]:
    """(the rate a dot runs at, the passes it takes) from its operands' dtypes."""
    names = [str(d) for d in dtypes]
    if any("int4" in n for n in names) or all("int8" in n for n in names):
        return "int8", 1
    if all("float8" in n for n in names):
        return ("fp8" if "fp8" in chip.rates else "int8"), 1
    if any(n == "float32" for n in names):
        if "tf32" in chip.rates:      # a GPU: TF32 by default, float32 work at HIGHEST
            return ("tf32", 1) if precision != "highest" else ("fp32", 1)
        return "bf16", {"highest": 6, "high": 3}.get(precision, 1)
    return "bf16", 1


@dataclasses.dataclass(frozen=True)
class KernelCost:
    kernel: str
    dot_flops: dict           # operand dtype -> flops of the dots the kernel executed
    elementwise: int          # elements produced by the rest of its work
    bytes: int                # HBM <-> VMEM, both ways
    vmem: footprint.Footprint  # as the chip lays it out (footprint.on_chip)
    dots: tuple = ()          # ((batch, m, k, n), (lhs dtype, rhs dtype), precision, times)
    transcendental: int = 0   # of the elements, those of exp, log, tanh...
    steps: int = 0            # grid steps
    operands: tuple = ()      # (name, "read"/"written", bytes, the minimum: its array once)
    backend: str = "mosaic_tpu"
    whose: str = ""           # "yours", "reference", "failed" (a failing test's run)
    config: str = ""          # the test configuration it was counted (or projected) at
    projected: bool = False   # counted at the tpu-marked configuration's sizes

    @property
    def flops(self) -> int:
        return sum(self.dot_flops.values())

    @property
    def minimum(self) -> int:
        return sum(op[3] for op in self.operands)

    @property
    def intensity(self) -> float:
        """Flops per byte moved (inf when nothing moved)."""
        return self.flops / self.bytes if self.bytes else float("inf")

    def mxu_seconds(self, chip: Chip) -> float:
        """The dots at the MXU's rate: by operand class and precision, padded to its tile."""
        if not self.dots:
            return sum(flops / chip.rates["int8" if "int" in dtype else "bf16"]
                       for dtype, flops in self.dot_flops.items())
        seconds = 0.0
        for (b, m, k, n), dtypes, precision, times in self.dots:
            kind, passes = operand_class(dtypes, precision, chip)
            rate = chip.rates.get(kind, chip.vector)
            m, k, n = _up(m, chip.rows), _up(k, chip.mxu), _up(n, chip.mxu)
            seconds += times * passes * 2 * b * m * k * n / rate
        return seconds

    compute_seconds = mxu_seconds

    def vector_seconds(self, chip: Chip) -> float:
        plain = max(self.elementwise - self.transcendental, 0)
        return plain / chip.vector + self.transcendental / chip.transcendental

    def memory_seconds(self, chip: Chip) -> float:
        return self.bytes / chip.hbm

    def overhead_seconds(self, chip: Chip) -> float:
        return self.steps * chip.step

    def parts(self, chip: Chip) -> dict[str, float]:
        return {chip.unit: self.mxu_seconds(chip), "vector": self.vector_seconds(chip),
                "HBM": self.memory_seconds(chip), "steps": self.overhead_seconds(chip)}

    def bound(self, chip: Chip) -> tuple[float, str]:
        """(a lower bound on the time, what bounds it: "compute-bound", "vector-bound",
        "overhead-bound" or "memory-bound")."""
        p = self.parts(chip)
        core = max(p[chip.unit], p["vector"]) + p["steps"]
        if p["HBM"] >= core:
            return p["HBM"], "memory-bound"
        if p["steps"] > max(p[chip.unit], p["vector"]):
            return core, "overhead-bound"
        return core, "compute-bound" if p[chip.unit] >= p["vector"] else "vector-bound"

    def line(self, chip: Chip) -> str:
        """'on TPU v5e: >= 41 µs (memory-bound, 12 flop/B), VMEM 3.1 of 16 MiB'."""
        seconds, kind = self.bound(chip)
        return (f"on {chip.name}: >= {duration(seconds)} ({kind}, {self._per_byte()}), "
                f"{chip.memory} {footprint._size(self.vmem.total)} of {_size(chip.scoped)}")

    def warning(self, chip: Chip) -> str:
        """'' when the kernel fits; else what does not fit, and the blocks that take most."""
        total = self.vmem.total
        if total <= chip.scoped:
            return ""
        if chip.memory != "VMEM":
            where = f"more than the {_size(chip.scoped)} of shared memory a block may take"
        else:
            where = ("more than the chip's VMEM" if total > chip.vmem else
                     f"more than the {chip.scoped // MiB} MiB a kernel gets by default (raise "
                     "vmem_limit_bytes in pltpu.CompilerParams, or take smaller blocks)")
        return (f"{self.kernel}() needs {total / MiB:.3g} MiB of {chip.memory} on {chip.name}, "
                f"{where}: {self.vmem.largest()}")

    def _per_byte(self) -> str:
        return "no HBM traffic" if not self.bytes else f"{self.intensity:.3g} flop/B"

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data.update(dot_flops=dict(self.dot_flops),
                    vmem=[self.vmem.kernel, [list(p) for p in self.vmem.parts]],
                    dots=[[list(s), list(d), p, t] for s, d, p, t in self.dots],
                    operands=[list(o) for o in self.operands])
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "KernelCost":
        name, parts = data["vmem"]
        return cls(**{**data, "dot_flops": dict(data["dot_flops"]),
                      "vmem": footprint.Footprint(name, tuple((w, s) for w, s in parts)),
                      "dots": tuple((tuple(s), tuple(d), p, t)
                                    for s, d, p, t in data.get("dots", ())),
                      "operands": tuple(tuple(o) for o in data.get("operands", ()))})


def _up(size: int, tile: int) -> int:
    return -(-size // tile) * tile if tile else size


def _size(nbytes: int) -> str:
    return f"{nbytes // MiB} MiB" if nbytes >= MiB else f"{nbytes // 1024} KiB"


def of(measured, whose: str = "", config: str = "") -> list[KernelCost]:
    """The cost of every kernel run of one measured program."""
    import numpy as np

    costs = []
    for run, counts in zip(measured.executed, measured.counts):
        ops = [op for op in measured.traffic.operands
               if op.site == run.site.index and op.direction in ("read", "written")]
        call = run.site.call
        costs.append(_cost(call, counts, ops, int(np.prod(
            [g for g in call.grid if g] or [1])), whose, config, False))
    return costs


def _cost(call, counts, operands, steps, whose, config, projected) -> KernelCost:
    if call.backend == "mosaic_gpu":
        return _gpu_cost(call, counts, steps, whose, config)
    return KernelCost(
        call.name, dict(counts.dot_flops), counts.elementwise,
        sum(op.bytes for op in operands), footprint.on_chip(call),
        dots=tuple((tuple(s), tuple(d), p, t) for (s, d, p), t in counts.dots.items()),
        transcendental=counts.transcendental, steps=steps,
        operands=tuple((op.name, op.direction, op.bytes, op.array_bytes) for op in operands),
        backend=call.backend, whose=whose, config=config, projected=projected)


def _gpu_cost(call, counts, steps, whose, config) -> KernelCost:
    """A Mosaic GPU kernel's cost: its wgmmas and TMA copies, as the walk of its
    integers counts them over every block (``gpu_walk``); none where it cannot."""
    from . import gpu_walk, jaxcompat

    found = gpu_walk.walk(call)
    names = [b.name for b in call.blocks] or jaxcompat.kernel_arg_names(call)
    dots = found.dots if found is not None else {}
    flops: dict[str, int] = {}
    for ((b, m, k, n), dtypes, _), times in dots.items():
        flops[dtypes[0]] = flops.get(dtypes[0], 0) + times * 2 * b * m * k * n
    invars = call.kernel.invars
    operands = tuple(
        (names[position] if position < len(names) and names[position].isidentifier()
         else f"input {position}" if position < call.num_inputs
         else f"output {position - call.num_inputs}",
         direction, nbytes,
         math.prod(invars[position].aval.shape) * invars[position].aval.dtype.itemsize)
        for (position, direction), (nbytes, _) in sorted(
            (found.copies if found is not None else {}).items(), key=str)
        if position is not None)
    return KernelCost(
        call.name, flops, counts.elementwise, sum(op[2] for op in operands),
        footprint.on_chip(call), dots=tuple(
            (tuple(s), tuple(d), p, t) for (s, d, p), t in dots.items()),
        transcendental=counts.transcendental, steps=steps, operands=operands,
        backend=call.backend, whose=whose, config=config, projected=False)


def project(traced, args: tuple, whose: str, config: str) -> list[KernelCost]:
    """The cost of every kernel of a traced program at the sizes it was traced at, from
    its index maps and an integer walk of its kernels (``walk.projected_counts``):
    nothing of the kernels' arithmetic runs. A kernel whose scalar-prefetch values
    cannot be known before a run is left out."""
    import jax

    from . import traffic, walk

    prefetched = walk.prefetch_before_run(traced.closed, jax.tree_util.tree_leaves(args)) or {}
    by_index = {index: eqn_id for eqn_id, index in traced._by_eqn.items()}
    costs = []
    for site in traced.sites:
        call = site.call
        if call.backend != "mosaic_tpu" or None in call.grid or site.mesh:
            continue
        prefetch = prefetched.get(by_index.get(site.index)) if call.num_prefetch else []
        if prefetch is None:
            continue
        counts, steps = walk.projected_counts(call, prefetch)
        operands = traffic._pipelined(call, prefetch, site.index)
        operands += traffic._dmas(call, counts, site.index)
        operands = [op for op in operands if op.direction in ("read", "written")]
        costs.append(_cost(call, counts, operands, steps, whose, config, True))
    return costs


def summary(costs: list[KernelCost]) -> list[str]:
    """The line a solved performance puzzle prints: the run's kernels together, on the
    first chip, with the second's bound beside it, and a warning for what does not fit."""
    if not costs:
        return []
    total = _together(costs)
    names = chips_for(costs[0].backend)
    first = CHIPS[names[0]]
    where = f"at {costs[0].config}, " if costs[0].projected and costs[0].config else ""
    line = where + total.line(first)
    if len(names) > 1:
        line += f" · on {CHIPS[names[1]].name}: >= {duration(total.bound(CHIPS[names[1]])[0])}"
    return [line] + [w for c in costs for w in [c.warning(first)] if w]


def _together(costs: list[KernelCost]) -> KernelCost:
    return KernelCost(", ".join(dict.fromkeys(c.kernel for c in costs)),
                      _add(c.dot_flops for c in costs), sum(c.elementwise for c in costs),
                      sum(c.bytes for c in costs),
                      max((c.vmem for c in costs), key=lambda f: f.total),
                      dots=tuple(d for c in costs for d in c.dots),
                      transcendental=sum(c.transcendental for c in costs),
                      steps=sum(c.steps for c in costs),
                      operands=tuple(o for c in costs for o in c.operands),
                      backend=costs[0].backend, whose=costs[0].whose, config=costs[0].config,
                      projected=costs[0].projected)


def priced_on(costs) -> str:
    """The chips a table of costs is priced on, in words: "a TPU", "an H100" or both."""
    backends = {c.backend == "mosaic_gpu" for c in costs}
    return " and ".join(words for gpu, words in ((False, "a TPU"), (True, "an H100"))
                        if gpu in backends) or "a TPU"


def table(rows: list[tuple[str, KernelCost]]) -> list[str]:
    """--cost: per kernel run, (label, cost) each: the label, the kernel's counts, and
    per chip its times (MXU, vector, HBM, step overhead) and the bound."""
    lines = []
    for label, c in rows:
        lines.append(label)
        unit = CHIPS[chips_for(c.backend)[0]].unit
        lines.append(f"  {c.kernel}(): {_count(c.flops, 'FLOP')} on the {unit} · "
                     f"{_count(c.elementwise, 'element')} on the vector unit · "
                     f"{c.steps:,} grid steps")
        lines.append(f"    HBM {_bytes(c.bytes)}{_against(c)} · "
                     f"{c._per_byte()} · {_memory_label(c)} {footprint._size(c.vmem.total)}")
        if c.operands:
            lines.append("    bytes per operand: " + " · ".join(
                f"{name} {_bytes(moved)}" + (f" ({moved / least:.3g}x)" if least else "")
                for name, _, moved, least in c.operands))
        for name in chips_for(c.backend):
            chip = CHIPS[name]
            p = c.parts(chip)
            seconds, kind = c.bound(chip)
            shown = " · ".join(f"{k} {duration(v)}" for k, v in p.items()
                               if v or k != "steps" or chip.step)
            lines.append(f"    {chip.name:<8} {shown} -> >= {duration(seconds)}, {kind} "
                         f"(ridge {chip.ridge:.3g} flop/B)")
        first = CHIPS[chips_for(c.backend)[0]]
        lines += [f"  ! {w}" for w in (c.warning(first),) if w]
    lines.append("bounds: the larger of the core's time (dot or vector work, whichever is "
                 "longer, plus the overhead of every grid step) and HBM bytes at the "
                 "chip's bandwidth; a lower bound. Vector rates are estimates. "
                 "Sources: pytest_pallas_hints/cost.py")
    return lines


def _against(c: KernelCost) -> str:
    least = c.minimum
    return f" ({c.bytes / least:.3g}x the minimum {_bytes(least)})" if least else ""


def _memory_label(c: KernelCost) -> str:
    return "SMEM" if c.backend == "mosaic_gpu" else "VMEM (padded to tiles)"


def _count(n: int, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g} {prefix}{unit}s" if unit == "FLOP" else \
                f"{n / scale:.3g}{prefix} {unit}s"
    return f"{n} {unit}s"


def _bytes(n: int) -> str:
    for scale, unit in ((1 << 30, "GiB"), (MiB, "MiB"), (1024, "KiB")):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


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
