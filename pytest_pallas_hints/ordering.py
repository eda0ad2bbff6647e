"""The Mosaic GPU ledger: in a kernel's program order, is every asynchronous read of
SMEM ordered after what it reads?

GPU interpret mode raises a race when a plain load reads SMEM that a TMA copy may
still be filling, or when a TMA copy out reads SMEM stored to without
``plgpu.commit_smem()``. It does not see the tensor core's reads: a ``plgpu.wgmma``
of an operand whose copy was never waited, or of a tile stored to and not
committed, computes the right product on a laptop and garbage on a Hopper. This
module reads the kernel's program in order, as one warpgroup runs it, and finds
those:

  race_barrier_wait  a wgmma reads an SMEM buffer that one of the kernel's own TMA
                     copies (plgpu.copy_gmem_to_smem) fills, with no barrier_wait on
                     the copy's barrier in between;
  race_commit        a wgmma (or a TMA copy out) reads an SMEM buffer that a plain
                     store wrote, with no commit_smem in between.

Copies made by plgpu.emit_pipeline are the pipeline's business (it waits for them
before calling its body). A loop's body is read twice, so that what one step leaves
behind meets the next step. Only kernels of one Pallas thread are read: across
warpgroups, program order says nothing (GPU interpret mode judges those).

Nothing here runs JAX: it reads a kernel's jaxpr.
"""
from __future__ import annotations

import dataclasses

from . import jaxcompat


@dataclasses.dataclass
class Problem:
    kind: str          # "race_barrier_wait" or "race_commit"
    eqn: object        # the read: a wgmma_ref or copy_smem_to_gmem equation
    other: object      # the copy in, or the store


@dataclasses.dataclass
class _State:
    pending: dict = dataclasses.field(default_factory=dict)   # buffer -> (barrier, copy eqn)
    dirty: dict = dataclasses.field(default_factory=dict)     # buffer -> store eqn

    def copy(self) -> "_State":
        return _State(dict(self.pending), dict(self.dirty))

    def merge(self, other: "_State") -> None:
        self.pending.update(other.pending)
        self.dirty.update(other.dirty)


def problems(call) -> list[Problem]:
    """The unordered asynchronous reads of one Mosaic GPU kernel (a KernelCall)."""
    if getattr(call, "backend", "") != "mosaic_gpu" or getattr(call, "threads", 1) != 1:
        return []
    kernel = call.kernel
    refs = {var: ("ref", n) for n, var in enumerate(kernel.invars)}
    found: list[Problem] = []
    _walk(kernel, refs, _State(), found)
    return found


def _walk(jaxpr, refs: dict, state: _State, found: list) -> _State:
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        ins = list(eqn.invars)
        if name == "copy_gmem_to_smem" and not jaxcompat.from_emit_pipeline(eqn):
            buffer = _root(ins[1], refs)
            if buffer is not None:
                state.pending[buffer] = (_barrier(eqn, refs), eqn)
        elif name == "barrier_wait":
            waited = _barrier(eqn, refs)
            state.pending = {b: (barrier, copy) for b, (barrier, copy) in state.pending.items()
                             if not _same_barrier(barrier, waited)}
        elif name in ("swap", "addupdate"):
            buffer = _root(ins[0], refs)
            if buffer is not None and jaxcompat.memory_space(ins[0].aval) == "smem":
                state.dirty[buffer] = eqn
        elif name == "commit_smem":
            state.dirty.clear()
        elif name == "wgmma_ref":
            for operand in ins[1:3]:
                _async_read(eqn, _root(operand, refs), state, found, copies_too=True)
        elif name == "copy_smem_to_gmem":
            _async_read(eqn, _root(ins[0], refs), state, found, copies_too=False)
        view = jaxcompat.control(eqn)
        if isinstance(view, jaxcompat.Scoped):
            inner, _ = view.body
            scoped = {var: ("scoped", id(var)) for var in inner.invars}
            inner_refs = {**_bind(inner.constvars, ins, refs), **scoped}
            state = _walk(inner, inner_refs, state, found)
        elif isinstance(view, jaxcompat.Branches):
            merged = state.copy()
            _, operands = view.split(ins)
            for inner, _ in view.programs:
                merged.merge(_walk(inner, _bind(inner.invars, operands, refs), state.copy(),
                                   found))
            state = merged
        elif isinstance(view, jaxcompat.Loop):
            body, _ = view.body
            inner_refs = _bind(body.invars, view.body_operands(ins), refs)
            for _ in range(2):
                state.merge(_walk(body, inner_refs, state.copy(), found))
        elif isinstance(view, jaxcompat.Inline):
            inner, _ = view.body
            state = _walk(inner, _bind(inner.invars, ins, refs), state, found)
    return state


def _async_read(eqn, buffer, state: _State, found: list, copies_too: bool) -> None:
    if buffer is None or any(p.eqn is eqn for p in found):
        return
    if copies_too and buffer in state.pending:
        found.append(Problem("race_barrier_wait", eqn, state.pending[buffer][1]))
    elif buffer in state.dirty:
        found.append(Problem("race_commit", eqn, state.dirty[buffer]))


def _root(var, refs: dict):
    return None if jaxcompat.is_literal(var) else refs.get(var)


def _barrier(eqn, refs: dict):
    """(the barrier buffer, its static index or None) that an equation names."""
    layout = jaxcompat.gpu_refs(eqn)
    if layout is None or "barrier" not in layout.names:
        return None, None
    ins = list(eqn.invars)
    leaves = layout.leaves_of("barrier", ins)
    index = tuple(int(v.val) for v in leaves) if leaves and all(
        jaxcompat.is_literal(v) for v in leaves) else None
    return _root(layout.ref("barrier", ins), refs), index


def _same_barrier(a, b) -> bool:
    (ref_a, index_a), (ref_b, index_b) = a, b
    if ref_a is None or ref_b is None or ref_a != ref_b:
        return ref_a is None or ref_b is None
    return index_a is None or index_b is None or index_a == index_b


def _bind(inner_vars, outer_vars, refs: dict) -> dict:
    return {inner: refs[outer] for inner, outer in zip(inner_vars, outer_vars)
            if not jaxcompat.is_literal(outer) and outer in refs}
