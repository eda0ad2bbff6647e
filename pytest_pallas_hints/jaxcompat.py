"""The one place that touches JAX's internals.

The kit reads traced programs (jaxprs), the parameters of ``pallas_call``,
the TPU interpreter's race reports and XLA's compiler entry point. Public
names are used wherever JAX has them (``jax.extend.core``, ``pl.Blocked``,
``jax.ref``); everything else, and every difference between JAX releases,
lives here, so that a new release touches one file.

Each feature built on internals has a capability probe (``missing()``):
where a probe fails on some future release, the checks that need that
feature end as "cannot be verified on JAX X" (``CannotVerify``, a skip that
never counts as passed) and every other check still runs.

Supported: JAX ``FLOOR`` and newer. JAX 0.11.x reuses a kernel's trace across
two grids (``pl.num_programs`` keeps the first grid's value, so a sum over a
grid axis adds the wrong number of steps); ``fix_kernel_trace_cache`` makes
every kernel trace fresh, which costs nothing measurable and makes 0.11
exact.

Nothing here imports JAX at module import time.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib.metadata
import math
import os
import re
import sys

import pytest

FLOOR = (0, 8, 0)
# Releases known to compute wrong answers that the kit cannot work around:
# version prefix -> why (none today: 0.11's fault is worked around, see above).
KNOWN_WRONG: dict[str, str] = {}
# Lets the kit's own tests pretend a feature is missing: "byte accounting,race detection".
MISSING_ENV = "PALLAS_HINTS_MISSING"


# ---------------------------------------------------------------- versions ---

def installed(package: str = "jax") -> str | None:
    """The installed version of ``package``, read without importing it."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version)[:3])


def unsupported(version: str | None) -> str | None:
    """Why this JAX cannot run the kit (one sentence with what to do), or None."""
    floor = ".".join(map(str, FLOOR))
    if version is None:
        return ("JAX is not installed in this Python: run `pip install -e .` in the kit's "
                "folder first (it installs JAX, pytest and the kit's plugin).")
    if _release(version) < FLOOR:
        return (f"JAX {version} is older than this kit supports (JAX {floor} or newer): "
                f"run `pip install -U 'jax>={floor}'`.")
    for prefix, why in KNOWN_WRONG.items():
        if version.startswith(prefix):
            return (f"JAX {version} computes some kernels wrongly ({why}), so the kit "
                    f"would judge right answers wrong: install another release.")
    return None


def jax_version() -> str:
    import jax

    return jax.__version__


# ---------------------------------------------------------------- features ---

class CannotVerify(pytest.skip.Exception):
    """A check this JAX cannot support: the test is skipped, never passed. Also a
    construct that is right on the hardware but that interpret mode does not run
    faithfully (``unfaithful``): never called wrong for it, never passed either."""

    def __init__(self, feature: str, reason: str = ""):
        self.feature, self.reason = feature, reason
        super().__init__(verdict(feature) + (f" ({reason})" if reason else ""),
                         allow_module_level=False)


def unfaithful(feature: str) -> bool:
    """Whether a CannotVerify ``feature`` is a construct interpret mode cannot run as the
    hardware would, not a feature this JAX lacks."""
    return feature.startswith(UNFAITHFUL)


UNFAITHFUL = "in interpret mode, "


def verdict(feature: str) -> str:
    """The words for a check skipped for ``feature``: "cannot be verified ..."."""
    if unfaithful(feature):
        return (f"cannot be verified here: {feature[len(UNFAITHFUL):]} (right on the "
                "hardware; interpret mode does not run it as the hardware does)")
    return f"cannot be verified on JAX {jax_version()}: {feature} is not available"


FEATURES = ("structure checks", "work accounting", "byte accounting", "race detection",
            "compile cache", "TPU lowering check")


def missing() -> dict[str, str]:
    """Feature -> why it is unavailable on this JAX (probed once, lazily)."""
    found = dict(_probes())
    for name in os.environ.get(MISSING_ENV, "").split(","):
        if name.strip():
            found[name.strip()] = "switched off by the kit's own tests"
    return found


def require(feature: str) -> None:
    """Raises CannotVerify if ``feature`` is missing on this JAX."""
    reason = missing().get(feature)
    if reason is None and feature in _COSTLY:
        reason = _COSTLY[feature]()
    if reason is not None:
        raise CannotVerify(feature, reason)


@functools.lru_cache(maxsize=None)
def _remote_dmas() -> str | None:
    """Why TPU interpret mode cannot simulate remote DMAs between chips here (None: it
    can): a copy to the neighbour on a ring of two simulated CPU devices, run once."""
    import jax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from .frozen import np

    if len(jax.devices("cpu")) < 2:
        return cpu_devices_missing(2)

    def kernel(x_ref, o_ref, send, recv):
        other = 1 - jax.lax.axis_index("x")
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(other,))
        copy.start()
        copy.wait()

    def shift(x):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            interpret=interpret_params())(x)

    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:2]), ("x",))
    x = np.arange(2 * 8 * 128, dtype=np.float32).reshape(16, 128)
    try:
        with jax.set_mesh(mesh):
            out = jax.jit(jax.shard_map(shift, mesh=mesh, in_specs=jax.sharding.PartitionSpec("x"),
                                        out_specs=jax.sharding.PartitionSpec("x"),
                                        check_vma=False))(x)
            out = np.asarray(out)
    except Exception as error:
        return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]}"
    if not np.array_equal(out, np.roll(x, 8, axis=0)):
        return "a copy to the neighbouring chip landed the wrong data"
    return None


def _mesh_kernels() -> str | None:
    """Why this JAX has no pl.kernel over a pltpu.TensorCoreMesh (None: it has)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    if not (hasattr(pl, "kernel") and hasattr(pltpu, "TensorCoreMesh")):
        return "this JAX has no pl.kernel or pltpu.TensorCoreMesh (the docs teach them since 0.11)"
    return None


# Features asked for only by the tests that need them (a probe may run a kernel).
_COSTLY = {"remote DMAs": _remote_dmas, "pl.kernel over a TensorCoreMesh": _mesh_kernels}


@functools.lru_cache(maxsize=None)
def _probes() -> tuple[tuple[str, str], ...]:
    gaps = []
    try:
        jaxpr_types()
        from jax.experimental import pallas as pl

        for name in ("Blocked", "Squeezed", "Element"):
            getattr(pl, name)
        _pallas_call_primitive()
    except Exception as error:
        for feature in ("structure checks", "work accounting", "byte accounting"):
            gaps.append((feature, f"{type(error).__name__}: {error}"))
    if _race_detector() is None and not _reports_races_by_raising():
        gaps.append(("race detection", "the TPU interpreter's race detector was not found"))
    if _compiler() is None:
        gaps.append(("compile cache", "JAX's compile entry point has another signature"))
    return tuple(gaps)


# ------------------------------------------------------- simulated devices ---

DEVICES_ENV = "JAX_NUM_CPU_DEVICES"   # read by JAX when it starts its CPU backend


def simulate_cpu_devices(count: int) -> None:
    """Asks JAX for ``count`` CPU devices (chips simulated on one CPU), where JAX has not
    started its backends yet: before JAX is imported through the environment (nothing
    is imported here), after through its config. A process that already started them
    keeps what it has (``cpu_devices_missing`` says so to the tests that need more)."""
    if count <= 1 or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return
    if "jax" not in sys.modules:
        if int(os.environ.get(DEVICES_ENV, "1") or 1) < count:
            os.environ[DEVICES_ENV] = str(count)
        return
    try:
        from jax._src import xla_bridge

        started = xla_bridge.backends_are_initialized()
    except (ImportError, AttributeError):
        return
    if not started and xla_bridge.num_cpu_devices.value < count:
        import jax

        jax.config.update("jax_num_cpu_devices", count)


def cpu_devices_missing(count: int) -> str | None:
    """Why this process cannot give ``count`` simulated chips (None: it can)."""
    import jax

    found = len(jax.devices("cpu"))
    if found >= count:
        return None
    return (f"JAX started its CPU backend with {found} device{'s' * (found != 1)} before the "
            f"kit could ask for {count} (set {DEVICES_ENV}={count}, or run pytest from the "
            "kit's folder so that its plugin starts first)")


# ------------------------------------------------------------------ jaxprs ---

def jaxpr_types():
    """(ClosedJaxpr, Jaxpr, Literal, Var) from jax.extend.core."""
    from jax.extend import core

    return core.ClosedJaxpr, core.Jaxpr, core.Literal, core.Var


def is_literal(v) -> bool:
    from jax.extend import core

    return isinstance(v, core.Literal)


def open_jaxpr(x):
    """(jaxpr, consts) for a Jaxpr or a ClosedJaxpr."""
    closed, jaxpr, _, _ = jaxpr_types()
    if isinstance(x, closed):
        return x.jaxpr, list(x.consts)
    return x, []


def is_jaxpr(x) -> bool:
    closed, jaxpr, _, _ = jaxpr_types()
    return isinstance(x, (closed, jaxpr))


_CALLS = {"jit", "pjit", "closed_call", "core_call", "eval_jaxpr", "custom_jvp_call",
          "custom_vjp_call", "custom_vjp_call_jaxpr", "remat2", "checkpoint", "custom_lin",
          "named_call", "custom_vmap_call"}   # custom_vmap_call: around plgpu.kernel


def inlined(eqn):
    """(jaxpr, consts) of a call-like equation whose body runs once, in place
    (jit, custom_vjp, remat...); None for anything else."""
    if eqn.primitive.name not in _CALLS:
        return None
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr", "call"):
        if is_jaxpr(eqn.params.get(key)):
            jaxpr, consts = open_jaxpr(eqn.params[key])
            if len(jaxpr.constvars) != len(consts):   # an open body with free constants
                return None
            return jaxpr, consts
    return None


def shard_map_body(eqn):
    """(jaxpr, ((axis name, size), ...)) of a shard_map equation: the body each device
    of the mesh runs on its own shard; None for any other equation."""
    if eqn.primitive.name != "shard_map" or not is_jaxpr(eqn.params.get("jaxpr")):
        return None
    mesh = eqn.params.get("mesh")
    shape = getattr(mesh, "shape", None)
    if not shape:
        return None
    names = getattr(mesh, "axis_names", tuple(shape))
    return open_jaxpr(eqn.params["jaxpr"])[0], tuple((name, int(shape[name])) for name in names)


def sub_jaxprs(eqn) -> list:
    """Every jaxpr among an equation's parameters, as (jaxpr, consts)."""
    found = []
    for value in eqn.params.values():
        for item in (value if isinstance(value, (tuple, list)) else [value]):
            if is_jaxpr(item):
                found.append(open_jaxpr(item))
    return found


# ------------------------------------------------------- a program's control flow ---
# JAX keeps the programs that run inside an equation among its parameters, each
# primitive its own way (a cond's branches; a while's cond and body with their counts of
# constants; a scan's body with its constants, carries, length and direction; a
# run_scoped body whose inputs are fresh allocations; a call's body). The kit reads them
# here only, as one of these views (``control``), and walks every equation of a program
# with its sub-programs through ``equations``.

@dataclasses.dataclass(frozen=True)
class Branches:
    """A cond (``pl.when``, ``lax.cond``): operand 0 picks a branch (clamped to the
    branches), and the branch runs on the other operands."""
    programs: tuple                     # (jaxpr, consts) per branch, in index order

    @staticmethod
    def split(values):
        """(the branch index, the branch's operands) from the equation's operands."""
        return values[0], list(values[1:])

    def picked(self, index):
        """The branch (jaxpr, consts) an index picks, as lax.cond clamps it."""
        return self.programs[min(max(int(index), 0), len(self.programs) - 1)]


@dataclasses.dataclass(frozen=True)
class Loop:
    """A while (``fori_loop`` with traced bounds, ``lax.while_loop``) or a scan
    (``fori_loop`` with static bounds, ``lax.scan``). The body runs on
    ``[*body consts, *carry, *xs]`` (a while has no xs) and returns the carry first; a
    while's condition runs on ``[*cond consts, *carry]``."""
    kind: str                           # "while" or "scan"
    body: tuple                         # (jaxpr, consts)
    cond: tuple | None                  # a while's condition (jaxpr, consts)
    num_cond_consts: int
    num_body_consts: int
    num_carry: int
    length: int | None = None           # a scan's number of iterations
    reverse: bool = False               # a scan that runs from its last iteration

    def split(self, values):
        """(cond consts, body consts, carry, xs) from the equation's operands."""
        values = list(values)
        c, b, n = self.num_cond_consts, self.num_body_consts, self.num_carry
        return values[:c], values[c:c + b], values[c + b:c + b + n], values[c + b + n:]

    def body_operands(self, values):
        """The operands, among the equation's, that the body's inputs stand for."""
        _, consts, carry, xs = self.split(values)
        return [*consts, *carry, *xs]

    def iterations(self):
        """A scan's iteration indices in the order it runs them."""
        steps = range(self.length or 0)
        return reversed(steps) if self.reverse else steps


@dataclasses.dataclass(frozen=True)
class Scoped:
    """A ``pl.run_scoped``: its body's inputs are the scoped allocations; the equation's
    operands are what its body closes over (the body's constvars)."""
    body: tuple                         # (jaxpr, consts)


@dataclasses.dataclass(frozen=True)
class Inline:
    """A call whose body runs once, in place, on the equation's operands (a jit, a
    custom_vjp or custom_jvp function, remat...)."""
    body: tuple                         # (jaxpr, consts)


_VIEWS: dict = {}   # id(eqn) -> (eqn, its view): interpreters ask once per step


def control(eqn):
    """The view of the programs inside ``eqn``: ``Branches``, ``Loop``, ``Scoped`` or
    ``Inline``; None for an equation with none of those (a kernel, a shard_map and
    plain ops; ``kernel_call`` and ``shard_map_body`` read the first two)."""
    cached = _VIEWS.get(id(eqn))
    if cached is not None and cached[0] is eqn:
        return cached[1]
    if len(_VIEWS) > 100_000:
        _VIEWS.clear()
    view = _VIEWS[id(eqn)] = (eqn, _control(eqn))
    return view[1]


def _control(eqn):
    name = eqn.primitive.name
    params = eqn.params
    if name == "cond":
        return Branches(tuple(open_jaxpr(b) for b in params["branches"]))
    if name == "while":
        return Loop("while", open_jaxpr(params["body_jaxpr"]), open_jaxpr(params["cond_jaxpr"]),
                    params["cond_nconsts"], params["body_nconsts"],
                    len(eqn.invars) - params["cond_nconsts"] - params["body_nconsts"])
    if name == "scan":
        num_consts, num_carry = scan_layout(eqn)
        return Loop("scan", open_jaxpr(params["jaxpr"]), None, 0, num_consts, num_carry,
                    length=int(params["length"]), reverse=bool(params.get("reverse")))
    if name == "run_scoped":
        return Scoped(open_jaxpr(params["jaxpr"]))
    body = inlined(eqn)
    return Inline(body) if body is not None else None


def parts(eqn) -> list:
    """The (jaxpr, consts) of every program inside ``eqn``, whatever it is: a branch, a
    loop's condition and body, a scoped or called body, a kernel, a shard_map's body."""
    view = control(eqn)
    if isinstance(view, Branches):
        return list(view.programs)
    if isinstance(view, Loop):
        return [view.body] + ([view.cond] if view.cond else [])
    if view is not None:
        return [view.body]
    return sub_jaxprs(eqn)


def equations(jaxpr, *, into=None):
    """Every equation of ``jaxpr`` and of the programs inside its equations, in program
    order, each before those inside it. ``into(eqn)``: whether to go inside ``eqn``
    (default: always)."""
    for eqn in jaxpr.eqns:
        yield eqn
        if into is None or into(eqn):
            for inner, _ in parts(eqn):
                yield from equations(inner, into=into)


def bind(eqn, invals, **overrides):
    """Applies ``eqn``'s primitive to ``invals`` (while tracing, or eagerly), with some
    parameters replaced, under the equation's own source location (so errors name
    the learner's line)."""
    from jax._src import source_info_util

    params = dict(eqn.params, **overrides)
    bound = eqn.primitive.get_bind_params(params)
    subfuns, bound = bound if isinstance(bound, tuple) else ((), bound)  # JAX < 0.9
    with source_info_util.user_context(eqn.source_info.traceback,
                                       name_stack=eqn.source_info.name_stack):
        out = eqn.primitive.bind(*subfuns, *invals, **bound)
    return list(out) if eqn.primitive.multiple_results else [out]


def frames(eqn) -> list[tuple[str, int]]:
    """(file, line) of the Python frames that made ``eqn``, innermost first."""
    traceback = getattr(getattr(eqn, "source_info", None), "traceback", None)
    try:
        return [(f.file_name, f.line_num) for f in traceback.frames] if traceback else []
    except Exception:
        return []


def call_site(eqn):
    """Which instruction of which Python frames made ``eqn``, as a hashable key, or None
    where this JAX does not record it. Equations made by one call in the learner's code
    share it (a Python loop traces that call once per iteration); two calls on one line
    do not (each is its own instruction)."""
    traceback = getattr(getattr(eqn, "source_info", None), "traceback", None)
    try:
        codes, lastis = traceback.raw_frames()
        return tuple(zip(codes, lastis))
    except Exception:
        return None


def from_emit_pipeline(eqn) -> bool:
    """Whether ``eqn`` (a DMA, or a TMA copy of Mosaic GPU) was made by
    ``pltpu.emit_pipeline`` (``plgpu.emit_pipeline``), not by the learner's
    own ``.start()``: the first frame past JAX's tracing machinery is the pipeline's code
    (pipeline.py, or its synchronous copies in helpers.py for a one-step pipeline; the
    recorded traceback may stop before the learner's call)."""
    if "ep_" in str(getattr(getattr(eqn, "source_info", None), "name_stack", "")):
        return True
    for path, _ in frames(eqn):
        path = path.replace("\\", "/")
        if path.endswith(("pallas/mosaic/pipeline.py", "pallas/mosaic/helpers.py",
                          "pallas/mosaic_gpu/pipeline.py")):
            return True
        if "/jax/_src/" in path and "/jax/_src/pallas/mosaic/" not in path \
                or path.endswith("pallas/mosaic/primitives.py"):
            continue   # the tracing machinery, and the primitive's own wrapper
        return False
    return False


# ------------------------------------------------------- what an op's parameters say ---

def grid_axis(eqn) -> int:
    """The grid axis a ``program_id`` or ``num_programs`` equation reads."""
    return int(eqn.params["axis"])


def mesh_axes(eqn) -> tuple:
    """The mesh axis names an ``axis_index`` equation reads (its index is row-major over
    several)."""
    names = eqn.params["axis_name"]
    return tuple(names) if isinstance(names, (tuple, list)) else (names,)


def _buffer_count(mode) -> int:
    """The buffers a BlockSpec's ``pipeline_mode=pl.Buffered(n)`` asks for (2 without)."""
    count = getattr(mode, "buffer_count", None)
    if isinstance(count, tuple):   # (in, out) counts: the larger is what VMEM holds
        count = max(count)
    return int(count) if isinstance(count, int) and count > 0 else 2


def dot_shape(eqn) -> tuple:
    """A ``dot_general``'s (batch, rows, contracted, cols) sizes, its operands' dtypes and
    its precision ("default", "high", "highest"): what an MXU's time depends on."""
    from .frozen import np

    (contract, _), (batch, _) = eqn.params["dimension_numbers"]
    lhs, rhs = eqn.invars[0].aval, eqn.invars[1].aval
    out = eqn.outvars[0].aval.shape
    count = lambda shape, dims: int(np.prod([shape[d] for d in dims], dtype=np.int64))
    b, k = count(lhs.shape, batch), count(lhs.shape, contract)
    free = [d for d in range(len(lhs.shape)) if d not in contract and d not in batch]
    m = count(lhs.shape, free)
    n = int(np.prod(out, dtype=np.int64)) // max(b * m, 1)
    precision = eqn.params.get("precision")
    if isinstance(precision, tuple):
        precision = precision[0]
    word = str(precision).lower().rsplit(".", 1)[-1] if precision is not None else "default"
    return (b, m, k, n), (str(lhs.dtype), str(rhs.dtype)), word


def contracting_dims(eqn) -> tuple:
    """The left operand's contracting dims of a ``dot_general`` equation."""
    (contract, _), _ = eqn.params["dimension_numbers"]
    return tuple(contract)


def relayout_only(eqn) -> bool:
    """Whether an equation moves no element relative to the others: a broadcast, a
    transpose or a slice that only adds, moves or drops dims of size 1 (what ``x[None]``,
    ``y[0]`` and ``jax.vmap`` over a batch of 1 write). Like a reshape, it is glue."""
    name = eqn.primitive.name
    if name not in ("broadcast_in_dim", "transpose", "slice", "dynamic_slice", "squeeze",
                    "expand_dims", "reshape") or len(eqn.invars) < 1:
        return False
    source, result = eqn.invars[0].aval, eqn.outvars[0].aval
    if math.prod(source.shape) != math.prod(result.shape):
        return False
    if name == "transpose":
        kept = [d for d in eqn.params["permutation"] if source.shape[d] != 1]
        return kept == sorted(kept)
    return True


def wgmma_left_running(eqn) -> int | None:
    """How many wgmma groups a ``wgmma_wait`` (or the wait of a
    ``wgmma_accumulator_deref``) leaves running; None for another equation."""
    name = eqn.primitive.name
    if name == "wgmma_wait":
        return int(eqn.params.get("n", 0))
    if name == "wgmma_accumulator_deref":
        return int(eqn.params.get("wait_n", 0))
    return None


def evaluated(eqn, values, np):
    """A primitive whose result depends on its parameters, computed in NumPy (``np``) from
    its operands' values: a cast, an integer power, a broadcast of a scalar, an iota.
    None for any other primitive (or a sharded iota)."""
    name, params = eqn.primitive.name, eqn.params
    if name == "convert_element_type":
        return np.asarray(values[0]).astype(params["new_dtype"])
    if name == "integer_pow":
        return np.power(values[0], params["y"])
    if name == "broadcast_in_dim" and np.ndim(values[0]) == 0:
        return np.broadcast_to(values[0], params["shape"])
    if name == "iota" and not params.get("sharding"):
        shape, dim = params["shape"], params["dimension"]
        return np.broadcast_to(np.arange(shape[dim], dtype=params["dtype"]).reshape(
            [-1 if d == dim else 1 for d in range(len(shape))]), shape)
    return None


def describe(x):
    """Text for everything in a jaxpr: its printout, plus every field of the
    parameters the printout abbreviates (a pallas_call's GridMapping omits its
    index maps, for one). An object whose repr names a memory address makes the
    text differ from run to run: as a cache key, a miss, never a false hit."""
    if is_jaxpr(x):
        yield str(x)
        jaxpr, _ = open_jaxpr(x)
        for eqn in jaxpr.eqns:
            for name, value in sorted(eqn.params.items()):
                yield name
                yield from describe(value)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        yield type(x).__qualname__
        for field in dataclasses.fields(x):
            yield field.name
            yield from describe(getattr(x, field.name))
    elif isinstance(x, (tuple, list)):
        yield f"{type(x).__name__}[{len(x)}]"
        for item in x:
            yield from describe(item)
    else:
        yield repr(x)


@dataclasses.dataclass(frozen=True)
class GpuRefs:
    """How a Mosaic GPU equation lays out its operands: the refs it names (a TMA copy's
    source, destination and barrier; a wgmma's accumulator, a and b; a barrier's
    barrier), each followed, after all the refs, by the leaves of the transforms that
    index it (``.at[...]``, tiling, swizzle), then the user's predicate, if any."""
    eqn: object
    names: tuple                 # the refs' roles, e.g. ("src", "dst", "barrier")
    refs: tuple                  # operand position of each ref
    leaves: tuple                # per ref: (start, stop) of its transform leaves
    predicate: int | None        # operand position of the user's predicate

    def ref(self, name: str, values):
        return values[self.refs[self.names.index(name)]]

    def leaves_of(self, name: str, values) -> tuple:
        lo, hi = self.leaves[self.names.index(name)]
        return tuple(values[lo:hi])

    def transforms(self, name: str, leaves):
        """The transforms of ref ``name``, rebuilt from the values of its leaves."""
        tree = self._trees[self.names.index(name)]
        return tree.unflatten(list(leaves)) if tree is not None else ()

    def shape(self, name: str) -> tuple:
        """The whole shape of ref ``name`` (before its transforms)."""
        return tuple(self.eqn.invars[self.refs[self.names.index(name)]].aval.shape)

    def window(self, name: str) -> tuple:
        """The shape of what ref ``name`` names after its transforms (a TMA copy's
        window, a wgmma's operand tile), from the equation alone: indexers pick, the
        tiling and swizzling of SMEM rearrange and keep every element."""
        lo, hi = self.leaves[self.names.index(name)]
        shape = self.shape(name)
        for transform in self.transforms(name, [v.aval for v in self.eqn.invars[lo:hi]]):
            if hasattr(transform, "get_indexer_shape"):   # an NDIndexer (.at[...])
                shape = tuple(transform.get_indexer_shape())
        return shape

    def skipped(self, values) -> bool:
        """Whether the user's predicate is known to be False (the op does nothing)."""
        return self.predicate is not None and values[self.predicate] is False

    @property
    def _trees(self) -> tuple:
        return tuple(self.eqn.params.get(tree) for tree in _GPU_TREES[self.eqn.primitive.name][1])


_GPU_TREES = {   # primitive -> (its refs' roles, the parameter holding each one's transforms)
    "copy_gmem_to_smem": (("src", "dst", "barrier"), ("src_transforms_treedef",
                          "dst_transforms_treedef", "barrier_transforms_treedef")),
    "copy_smem_to_gmem": (("src", "dst"), ("src_transforms_treedef", "dst_transforms_treedef")),
    "wgmma_ref": (("acc", "a", "b"), ("acc_transforms_tree", "a_transforms_tree",
                                      "b_transforms_tree")),
    "barrier_arrive": (("barrier",), ("transforms_treedef",)),
    "barrier_wait": (("barrier",), ("transforms_treedef",)),
}


def gpu_refs(eqn) -> GpuRefs | None:
    """The operand layout of a Mosaic GPU TMA copy, wgmma or barrier equation; None for
    any other equation."""
    if eqn.primitive.name not in _GPU_TREES:
        return None
    names, trees = _GPU_TREES[eqn.primitive.name]
    params = eqn.params
    if eqn.primitive.name == "copy_gmem_to_smem" and not params.get("has_barrier", True):
        names, trees = names[:2], trees[:2]
    start, leaves = len(names), []
    for tree in trees:
        count = params[tree].num_leaves if params.get(tree) is not None else 0
        leaves.append((start, start + count))
        start += count
    predicate = start if params.get("has_user_predicate") else None
    return GpuRefs(eqn, names, tuple(range(len(names))), tuple(leaves), predicate)


def is_ref(aval) -> bool:
    import jax

    return isinstance(aval, jax.ref.AbstractRef)


def memory_space(aval) -> str:
    """"vmem", "smem", "any", "semaphore"... for a ref's aval ("" when unset)."""
    space = getattr(aval, "memory_space", None)
    text = str(getattr(space, "value", space) or "").lower()
    return {"none": "", "hbm": "any"}.get(text, text)


def scan_layout(eqn) -> tuple[int, int]:
    """(number of consts, number of carries) of a scan equation."""
    if "num_consts" in eqn.params:
        return eqn.params["num_consts"], eqn.params["num_carry"]
    consts, carry, _ = eqn.params["ft_in"].unpack()  # JAX >= 0.12: a flat tree
    return len(consts.vals), len(carry.vals)


def ref_indices(eqn, invals, unknown):
    """The index a `get`, `swap` or `addupdate` equation applies to its ref, as a
    tuple of ints, arrays and slices, given the values of its operands; None when
    a part of it is ``unknown``."""
    import jax
    from .frozen import np

    tree = eqn.params.get("tree")
    flat = list(invals[2 if eqn.primitive.name in ("swap", "addupdate") else 1:])
    if tree is None:
        return ()
    if any(v is unknown for v in flat):
        return None
    try:
        transforms = (tree.unflatten(flat) if hasattr(tree, "unflatten")
                      else jax.tree_util.tree_unflatten(tree, flat))
    except Exception:
        return None
    if len(transforms) == 0:
        return ()
    if len(transforms) != 1 or not hasattr(transforms[0], "indices"):
        return None
    picked = []
    for index in transforms[0].indices:
        if hasattr(index, "start") and hasattr(index, "size"):  # a pl.ds / Slice
            start, stride = int(index.start), int(getattr(index, "stride", 1) or 1)
            # stop just past the last element picked: a strided slice ends there, not
            # size * stride past its start (the bound the walker checks against the ref)
            picked.append(slice(start, start + (int(index.size) - 1) * stride + 1, stride))
        else:
            picked.append(np.asarray(index))
    return tuple(picked)


def dma_copy(eqn) -> tuple[str, str, int]:
    """(source memory space, destination memory space, bytes) of a dma_start equation."""
    from .frozen import np

    tree = eqn.params["tree"]
    parts = (tree.unflatten(eqn.invars) if hasattr(tree, "unflatten")
             else __import__("jax").tree_util.tree_unflatten(tree, eqn.invars))
    if len(parts) >= 9:  # JAX < 0.9: (src, src transforms, dst, dst transforms, ...)
        src, src_t, dst = parts[:3]
    else:                # a TransformedRef each, or a plain ref
        src, dst = parts[:2]
        src, src_t = getattr(src, "ref", src), getattr(src, "transforms", ())
        dst = getattr(dst, "ref", dst)
    shape = tuple(src.aval.shape)
    for transform in src_t or ():
        shape = tuple(int(d) for d in _transformed_shape(transform, shape))
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(src.aval.dtype).itemsize
    return memory_space(src.aval), memory_space(dst.aval), nbytes


@dataclasses.dataclass(frozen=True)
class DmaRefs:
    """What a dma_start or dma_wait equation names, given its operands' values during a
    walk: each ref's value (what the walk holds for it) and the box of it the copy
    touches, ((start, stop) per dim of the whole ref; None where an index is unknown)."""
    src: object
    src_box: tuple | None
    dst: object
    dst_box: tuple | None
    sem: object
    sem_box: tuple | None
    nbytes: int        # the size of the destination window (what a wait waits for)
    remote: bool       # a copy to or from another device: its semaphores are shared
    outside: str = ""  # "src [(-1, 0)] of shape (2,)": a window past the ends of its ref
    send_sem: object = None      # a remote copy's semaphore on the sending device
    send_sem_box: tuple | None = None
    device_id: object = None     # where a remote copy goes: a tuple of mesh coordinates,
    #                              a dict axis -> coordinate, or an int (values of the walk)
    logical: bool = False        # device_id is a logical device number, not mesh coordinates


def dma_refs(eqn, values, unknown) -> DmaRefs:
    """The refs and windows of a dma_start or dma_wait equation (the same operand
    layout for both in every release), from the walk's ``values`` of its operands."""
    from .frozen import np

    tree = eqn.params["tree"]

    def unflatten(leaves):
        return (tree.unflatten(leaves) if hasattr(tree, "unflatten")
                else __import__("jax").tree_util.tree_unflatten(tree, leaves))

    parts, avals = unflatten(list(values)), unflatten(list(eqn.invars))
    if len(parts) >= 9:  # JAX < 0.9: (src, src transforms, dst, dst transforms, dst sem,
        # dst sem transforms, src sem, src sem transforms, device id)
        pairs = [(parts[i], parts[i + 1] or (), avals[i]) for i in (0, 2, 4)]
        src_sem, device_id = parts[6], parts[8]
        send = (parts[6], parts[7] or (), avals[6])
        dst_transforms = avals[3] or ()
    else:                # a TransformedRef each, or a plain ref
        pairs = [(getattr(p, "ref", p), getattr(p, "transforms", ()), getattr(a, "ref", a))
                 for p, a in zip(parts[:3], avals[:3])]
        src_sem, device_id = parts[3], parts[4]
        send = (getattr(src_sem, "ref", src_sem), getattr(src_sem, "transforms", ()),
                getattr(avals[3], "ref", avals[3]))
        dst_transforms = getattr(avals[1], "transforms", ())
    boxes = [_box(tuple(var.aval.shape), transforms, unknown)
             for _, transforms, var in pairs]
    dst_var = pairs[1][2]
    shape = tuple(dst_var.aval.shape)
    for transform in dst_transforms or ():
        shape = tuple(int(d) for d in _transformed_shape(transform, shape))
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dst_var.aval.dtype).itemsize
    outside = ""
    for name, box, (_, _, var) in zip(("source", "destination", "semaphore"), boxes, pairs):
        dims = tuple(var.aval.shape)
        if box is not None and any(lo < 0 or hi > d for (lo, hi), d in zip(box, dims)):
            outside = f"{name} {[tuple(b) for b in box]} of a ref of shape {dims}"
            break
    send_box = (_box(tuple(send[2].aval.shape), send[1], unknown)
                if src_sem is not None and hasattr(send[2], "aval") else None)
    return DmaRefs(src=pairs[0][0], src_box=boxes[0], dst=pairs[1][0], dst_box=boxes[1],
                   sem=pairs[2][0], sem_box=boxes[2], nbytes=nbytes,
                   remote=src_sem is not None or device_id is not None, outside=outside,
                   send_sem=send[0] if src_sem is not None else None, send_sem_box=send_box,
                   device_id=device_id, logical=_logical(eqn))


def _logical(eqn) -> bool:
    kind = eqn.params.get("device_id_type")
    return "logical" in str(getattr(kind, "value", kind)).lower()


@dataclasses.dataclass(frozen=True)
class SemaphoreRefs:
    """What a semaphore_signal or semaphore_wait equation names, during a walk."""
    sem: object
    sem_box: tuple | None
    amount: object          # the increment, or the value waited for
    device_id: object = None
    logical: bool = False


def semaphore_refs(eqn, values, unknown) -> SemaphoreRefs:
    """The semaphore, the amount and (for a signal) the device of a semaphore_signal
    or semaphore_wait equation: (ref, transforms, inc, device id, core) and (ref,
    transforms, value, decrement) in every supported release."""
    tree = eqn.params["args_tree"]
    import jax

    parts = jax.tree_util.tree_unflatten(tree, list(values))
    avals = jax.tree_util.tree_unflatten(tree, list(eqn.invars))
    ref, transforms, amount = parts[0], parts[1] or (), parts[2]
    box = _box(tuple(avals[0].aval.shape), transforms, unknown)
    device_id = parts[3] if eqn.primitive.name == "semaphore_signal" else None
    return SemaphoreRefs(ref, box, amount, device_id, _logical(eqn))


@dataclasses.dataclass(frozen=True)
class _Index:
    """One index of an ``.at[...]`` indexer, in a chain of them."""
    dim: int       # the dim of the whole ref it indexes
    axis: int      # its axis in the view it indexes (what the one before it left)
    extent: int    # the size of that axis of the view
    start: int     # what it selects of that axis: [start, stop)
    stop: int
    sliced: bool   # a slice (pl.ds), not an integer


def _indexed(shape: tuple, transforms, unknown) -> list[_Index] | None:
    """Every index of ``transforms`` (``.at[...]`` indexers, chained), each against the
    view it indexes; None where one is not known or not a plain int or slice."""
    from .frozen import np

    def known(*values):
        return all(v is not None and v is not unknown and not np.ndim(v) for v in values)

    view = [(dim, int(d)) for dim, d in enumerate(shape)]   # (whole-ref dim, extent)
    found = []
    for transform in transforms or ():
        indices = getattr(transform, "indices", None)
        if indices is None or len(indices) != len(view):
            return None
        kept = []
        for axis, ((dim, extent), index) in enumerate(zip(view, indices)):
            if hasattr(index, "start") and hasattr(index, "size"):  # pl.ds / a slice
                start, size = index.start, index.size
                stride = getattr(index, "stride", 1) or 1
                if not known(start, size, stride):
                    return None
                stop = int(start) + (int(size) - 1) * int(stride) + 1
                found.append(_Index(dim, axis, extent, int(start), stop, True))
                kept.append((dim, int(size)))
            elif known(index):
                found.append(_Index(dim, axis, extent, int(index), int(index) + 1, False))
            else:
                return None
        view = kept
    return found


def _box(shape: tuple, transforms, unknown) -> tuple | None:
    """The (start, stop) per dim of a ref of ``shape`` that ``transforms`` (``.at[...]``
    indexers, chained) select; None if an index is unknown or not a plain int or slice."""
    indexed = _indexed(shape, transforms, unknown)
    if indexed is None:
        return None
    box = [[0, int(d)] for d in shape]
    for index in indexed:
        first = box[index.dim][0]
        box[index.dim] = [first + index.start, first + index.stop]
    return tuple(tuple(b) for b in box)


def outside_view(shape: tuple, transforms, unknown=None) -> str:
    """Where ``transforms`` index past the view they index, each indexer checked
    against the view the one before it left (not only the whole ref): "elements
    128..192 along axis 1 of 128", or "" where every index is inside or not known."""
    for index in _indexed(shape, transforms, unknown) or ():
        if index.start < 0 or index.stop > index.extent:
            what = (f"elements {index.start}..{index.stop}" if index.sliced
                    else f"index {index.start}")
            return f"{what} along axis {index.axis} of {index.extent}"
    return ""


def _transformed_shape(transform, shape):
    if hasattr(transform, "get_indexer_shape"):
        return transform.get_indexer_shape()
    if hasattr(transform, "transform_shape"):
        return transform.transform_shape(shape)
    raise TypeError(f"unknown ref transform {type(transform).__name__}")


# -------------------------------------------------------------- pallas_call ---

@dataclasses.dataclass(frozen=True)
class Block:
    """One operand of a pallas_call as its BlockSpec sees it."""
    name: str
    is_input: bool
    block_shape: tuple          # an int per dim; None for a squeezed dim
    element_dims: tuple         # dims whose index is an element offset (pl.Element)
    array_shape: tuple
    dtype: object
    index_map: tuple            # (jaxpr, consts): grid indices (+ prefetch refs) -> block indices
    space: str                  # "vmem", "smem", "any" ("" when Pallas picks)
    index_map_source: tuple = ()  # (file, line) of the index map function, where known
    buffers: int = 2            # VMEM buffers the pipeline keeps (pl.Buffered(n); 2 by default)


@dataclasses.dataclass(frozen=True)
class KernelCall:
    """What the kit reads from one pallas_call equation."""
    name: str
    source: str                 # the file that defines the kernel function
    line: int
    grid: tuple                 # ints; None for a grid axis sized at run time
    num_prefetch: int
    blocks: tuple               # Block per input then per output
    num_inputs: int
    kernel: object              # the kernel's jaxpr: refs in, nothing out
    scratch: tuple              # avals of the scratch operands
    dynamic_grid: tuple         # positions of the dynamic grid bounds among the operands
    semantics: tuple = ()       # "parallel" / "arbitrary" per grid axis, where given
    backend: str = "mosaic_tpu"  # or "mosaic_gpu": a plgpu.kernel (Mosaic GPU, Hopper)
    threads: int = 1            # Pallas threads (warpgroups) per block (Mosaic GPU)
    api: str = "pl.pallas_call"  # how it was written: or "pl.kernel", "plgpu.kernel"
    axes: tuple = ()            # Mosaic GPU: (name, size) per grid axis, then the threads'
    collective_id: int | None = None   # pltpu.CompilerParams(collective_id=...), if given
    num_outputs: int = 0        # the kernel's outputs (refs after the inputs)

    @property
    def output_refs(self) -> range:
        """The positions, among the kernel's refs, of its outputs."""
        start = self.num_prefetch + self.num_inputs
        return range(start, start + self.num_outputs)


# A Mosaic GPU kernel (plgpu.kernel) is an mpmd_map equation: one program per mesh,
# its refs in GMEM, its grid the mesh's CUDA grid; no BlockSpecs.
_KERNELS = ("pallas_call", "mpmd_map")


# Shape moves that keep a 0/1 mask a 0/1 mask.
_MASK_MOVES = {"broadcast_in_dim", "reshape", "squeeze", "expand_dims", "transpose"}


def tpu_multiplies(x):
    """``x`` (a Jaxpr or a ClosedJaxpr) with every multiply by a mask made from a
    comparison (``x * (row < M).astype(f32)``) kept a multiply when it runs here.

    XLA on a CPU turns such a multiply into a select, so NaN or inf in ``x`` where the
    mask is 0 gives 0, while a TPU computes NaN * 0 = NaN: a tail of garbage rows, or
    an exp that overflowed before its mask, would pass here and fail there. An
    optimization barrier on the mask hides the comparison from XLA's simplifier."""
    from jax._src import core
    from jax._src.lax import lax

    _, _, _, var_type = jaxpr_types()
    if getattr(x, "jaxpr", x) is not x:   # a ClosedJaxpr (JAX >= 0.12: one type for both)
        return x.replace(jaxpr=tpu_multiplies(x.jaxpr))
    masks, eqns = set(), []
    for eqn in x.eqns:
        params = {k: _tpu_multiplies_in(v) for k, v in eqn.params.items()}
        name, ins = eqn.primitive.name, eqn.invars
        if name == "convert_element_type" and str(ins[0].aval.dtype) == "bool":
            masks.update(eqn.outvars)
        elif name in _MASK_MOVES and isinstance(ins[0], var_type) and ins[0] in masks:
            masks.update(eqn.outvars)
        elif name == "mul" and any(isinstance(v, var_type) and v in masks for v in ins):
            kept = []
            for v in ins:
                if isinstance(v, var_type) and v in masks:
                    barrier = var_type(v.aval)
                    eqns.append(core.new_jaxpr_eqn([v], [barrier], lax.optimization_barrier_p,
                                                   {}, core.no_effects, eqn.source_info))
                    v = barrier
                kept.append(v)
            eqn = eqn.replace(invars=kept)
        eqns.append(eqn.replace(params=params) if params != eqn.params else eqn)
    return x.replace(eqns=eqns)


def multiplying_as_on_chip(eqn) -> dict:
    """The parameters that make kernel equation ``eqn`` multiply as the chip does
    (``tpu_multiplies``; a GPU also computes NaN * 0 = NaN): its body or bodies."""
    key = "jaxprs" if eqn.primitive.name == "mpmd_map" else "jaxpr"
    return {key: _tpu_multiplies_in(eqn.params[key])}


def _tpu_multiplies_in(value):
    return _each_jaxpr(value, tpu_multiplies)


def _each_jaxpr(value, rewrite):
    """An equation parameter with ``rewrite`` applied to the jaxpr it is, or to each
    jaxpr of the tuple it is (a cond's branches); any other value as it is."""
    if is_jaxpr(value):
        return rewrite(value)
    if isinstance(value, tuple) and any(is_jaxpr(v) for v in value):
        return tuple(rewrite(v) if is_jaxpr(v) else v for v in value)
    return value


def perturbing(x, tags: dict, chosen):
    """``x`` (a kernel body: a Jaxpr or a ClosedJaxpr, its sub-programs included) with
    the result of every equation whose ``id`` is a key of ``tags`` (the dots) followed
    by its perturbation: where ``chosen()``, called by a host callback each time the
    equation runs, holds the equation's tag, its result is doubled in half its elements
    (a checkerboard over its indices, the first element doubled); where not, the result
    is left as it is, bit for bit.

    What the kit asks of a dot is whether its result is used: run again with it
    perturbed, does the output move? The change is a factor, so a result scaled until
    it rounds away stays negligible, and a select or a maximum that never picks it
    still does not; a checkerboard, so no normalization (a softmax, a norm) divides it
    out; a factor of 2, exact in every float and integer type. A zero stays zero: a
    dot whose every result on this input is zero (operands scaled until they underflow,
    or a state that is still zero) computes nothing the output needs here, and is not
    made to look as if it did by adding something. The choice is read at run time so
    that one compiled program serves the learner's run (no dot chosen) and every
    perturbed run after it."""
    _, _, _, var_type = jaxpr_types()
    if getattr(x, "jaxpr", x) is not x:   # a ClosedJaxpr (JAX >= 0.12: one type for both)
        return x.replace(jaxpr=perturbing(x.jaxpr, tags, chosen))
    eqns = []
    for eqn in x.eqns:
        if id(eqn) in tags and len(eqn.outvars) == 1:
            result = eqn.outvars[0]
            before = var_type(result.aval)
            eqns.append(eqn.replace(outvars=[before]))
            eqns += _perturbation(before, result, tags[id(eqn)], chosen)
            continue
        params = {k: _perturbing_in(v, tags, chosen) for k, v in eqn.params.items()}
        eqns.append(eqn.replace(params=params) if params != eqn.params else eqn)
    return x.replace(eqns=eqns)


def perturbed(eqn, tags: dict, chosen):
    """Kernel equation ``eqn`` with ``perturbing`` applied to its body or bodies."""
    key = "jaxprs" if eqn.primitive.name == "mpmd_map" else "jaxpr"
    return eqn.replace(params=dict(eqn.params, **{key: _perturbing_in(eqn.params[key], tags,
                                                                       chosen)}))


def _perturbing_in(value, tags: dict, chosen):
    return _each_jaxpr(value, lambda jaxpr: perturbing(jaxpr, tags, chosen))


def _perturbation(before, after, tag: int, chosen) -> list:
    """Equations that compute ``after`` from ``before`` (two variables of one type), as
    ``perturbing`` says; traced once with JAX's own ops and spliced in."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    _, _, _, var_type = jaxpr_types()
    shape, dtype = before.aval.shape, before.aval.dtype

    def on():
        return jnp.int32(tag in chosen()).__array__()

    def perturbation(t):
        checker = jnp.int32(1)
        for d in range(len(shape)):
            checker = checker + lax.broadcasted_iota(jnp.int32, shape, d)
        moved = t + (checker % 2).astype(dtype) * t
        chosen_now = jax.pure_callback(on, jax.ShapeDtypeStruct((), jnp.int32))
        return jnp.where(chosen_now != 0, moved, t)   # t itself, bit for bit, if not

    closed = jax.make_jaxpr(perturbation)(jax.ShapeDtypeStruct(shape, dtype))
    inner = closed.jaxpr
    if closed.consts or not inner.eqns:
        raise ValueError("the perturbation of a dot needs constants")
    renamed = {inner.invars[0]: before, inner.outvars[0]: after}

    def rename(vs):
        return [renamed.get(v, v) if isinstance(v, var_type) else v for v in vs]

    return [e.replace(invars=rename(e.invars), outvars=rename(e.outvars)) for e in inner.eqns]


def is_kernel(eqn) -> bool:
    return eqn.primitive.name in _KERNELS


def kernel_call(eqn) -> KernelCall:
    from jax.experimental import pallas as pl

    if eqn.primitive.name == "mpmd_map":
        if type(eqn.params["meshes"][0]).__name__ == "TensorCoreMesh":
            return _tensorcore_kernel_call(eqn)
        return _gpu_kernel_call(eqn)
    params = eqn.params
    mapping = params["grid_mapping"]
    kernel = params["jaxpr"]
    debug = getattr(kernel, "debug_info", None)
    where = str(getattr(debug, "func_src_info", "") or "")
    found = re.match(r"(\S+) at (.+):(\d+)$", where)
    name = str(params.get("name") or (found[1] if found else "kernel"))
    names = _operand_names(kernel, mapping)
    blocks = []
    for n, block in enumerate(mapping.block_mappings):
        sizes, elements = [], []
        for d, dim in enumerate(block.block_shape):
            if isinstance(dim, pl.Squeezed) or dim is None:
                sizes.append(None)
            elif isinstance(dim, pl.Element):
                sizes.append(int(dim.block_size))
                elements.append(d)
            else:
                sizes.append(int(getattr(dim, "block_size", dim)))
        array = getattr(block, "array_aval", None) or getattr(block, "array_shape_dtype")
        blocks.append(Block(
            name=names[n], is_input=n < mapping.num_inputs, block_shape=tuple(sizes),
            element_dims=tuple(elements), array_shape=tuple(array.shape), dtype=array.dtype,
            index_map=open_jaxpr(block.index_map_jaxpr),
            space=memory_space(block.transformed_block_aval),
            index_map_source=_source(block.index_map_jaxpr),
            buffers=_buffer_count(getattr(block, "pipeline_mode", None))))
    grid = tuple(g if isinstance(g, int) else None for g in mapping.grid)
    return KernelCall(
        name=name, source=found[2] if found else "", line=int(found[3]) if found else 0,
        grid=grid, num_prefetch=mapping.num_index_operands, blocks=tuple(blocks),
        num_inputs=mapping.num_inputs, kernel=kernel, num_outputs=len(eqn.outvars),
        scratch=tuple(getattr(mapping, "scratch_avals", ()) or ()),
        dynamic_grid=tuple(i for i, g in enumerate(grid) if g is None),
        semantics=_semantics(params.get("compiler_params")),
        collective_id=_collective_id(params.get("compiler_params")))


def _gpu_kernel_call(eqn) -> KernelCall:
    """What the kit reads from a plgpu.kernel (an mpmd_map equation)."""
    params = eqn.params
    mesh, kernel = params["meshes"][0], params["jaxprs"][0]
    kernel = kernel.jaxpr if hasattr(kernel, "jaxpr") else kernel
    source, line = _first_user_frame(kernel)
    grid = tuple(int(g) for g in (getattr(mesh, "grid", ()) or ()))
    name = str(params.get("name") or "")
    if name in ("", "anonymous"):   # a functools.partial: the function's name, if known
        found = re.match(r"(\w+) at ", str(getattr(getattr(kernel, "debug_info", None),
                                                  "func_src_info", "") or ""))
        name = found[1] if found and found[1] not in ("anonymous", "wrapper") else "kernel"
    return KernelCall(
        name=name, source=source, line=line, grid=grid,
        num_prefetch=0, blocks=(), num_inputs=len(eqn.invars), kernel=kernel, scratch=(),
        num_outputs=len(eqn.outvars),
        dynamic_grid=(), semantics=(), backend="mosaic_gpu",
        threads=int(getattr(mesh, "num_threads", None) or 1),
        axes=(*zip(tuple(getattr(mesh, "grid_names", ()) or ()), grid),
              *(((mesh.thread_name, int(mesh.num_threads)),)
                if getattr(mesh, "thread_name", None) and getattr(mesh, "num_threads", None)
                else ())), api="plgpu.kernel")


def _tensorcore_kernel_call(eqn) -> KernelCall:
    """What the kit reads from a pl.kernel over a pltpu.TensorCoreMesh (an mpmd_map
    equation): a kernel with no grid whose inputs and outputs stay where they are (HBM,
    as ``memory_space=pl.ANY`` in a pallas_call), its scratch_types after them."""
    import jax

    params = eqn.params
    kernel = params["jaxprs"][0]
    kernel = kernel.jaxpr if hasattr(kernel, "jaxpr") else kernel
    source, line = _first_user_frame(kernel)
    names = list(getattr(getattr(kernel, "debug_info", None), "arg_names", None) or ())
    operands = len(eqn.invars) + len(params["out_avals"])
    blocks = []
    for n, var in enumerate(kernel.invars[:operands]):
        aval = var.aval
        zeros = jax.make_jaxpr(lambda ndim=len(aval.shape): (0,) * ndim)()
        blocks.append(Block(
            name=names[n] if n < len(names) and names[n] else f"operand {n}",
            is_input=n < len(eqn.invars), block_shape=tuple(aval.shape), element_dims=(),
            array_shape=tuple(aval.shape), dtype=aval.dtype,
            index_map=(zeros.jaxpr, zeros.consts), space=memory_space(aval)))
    name = str(params.get("name") or "")
    if name in ("", "anonymous"):
        found = re.match(r"(\w+) at ", str(getattr(getattr(kernel, "debug_info", None),
                                                  "func_src_info", "") or ""))
        name = found[1] if found and found[1] not in ("anonymous", "wrapper") else "kernel"
    return KernelCall(
        name=name, source=source, line=line, grid=(), num_prefetch=0, blocks=tuple(blocks),
        num_inputs=len(eqn.invars), kernel=kernel, num_outputs=len(params["out_avals"]),
        scratch=tuple(v.aval for v in kernel.invars[operands:]), dynamic_grid=(),
        semantics=_semantics(params.get("compiler_params")), api="pl.kernel",
        collective_id=_collective_id(params.get("compiler_params")))


def _first_user_frame(jaxpr) -> tuple[str, int]:
    """(file, line) of the first equation of ``jaxpr`` (depth first) made outside JAX:
    a line of the kernel's own body (plgpu.kernel's jaxpr names JAX's wrapper)."""
    for eqn in equations(jaxpr):
        for path, line in frames(eqn):
            if "/jax/" not in path.replace("\\", "/") and "pytest_pallas_hints" not in path:
                return path, line
    return "", 0


def _tpu_params(compiler_params):
    """The TPU's compiler params of a kernel (a dict of them per backend in JAX < 0.9,
    the TPU's own params since), or None."""
    if hasattr(compiler_params, "get") and not hasattr(compiler_params, "dimension_semantics"):
        compiler_params = compiler_params.get("mosaic_tpu") or compiler_params.get("mosaic")
    return compiler_params


def _collective_id(compiler_params) -> int | None:
    """The collective id a kernel's barrier semaphore needs, where one was given."""
    found = getattr(_tpu_params(compiler_params), "collective_id", None)
    return None if found is None else int(found)


def _semantics(compiler_params) -> tuple:
    """("parallel", "arbitrary", ...) from a pallas_call's compiler params."""
    found = getattr(_tpu_params(compiler_params), "dimension_semantics", None) or ()
    return tuple(str(getattr(s, "value", s)).lower().rsplit(".", 1)[-1] for s in found)


def _source(jaxpr) -> tuple:
    """(file, line) a traced function came from, from its debug info."""
    debug = getattr(jaxpr, "debug_info", None) or getattr(getattr(jaxpr, "jaxpr", None),
                                                          "debug_info", None)
    found = re.match(r"\S+ at (.+):(\d+)$", str(getattr(debug, "func_src_info", "") or ""))
    return (found[1], int(found[2])) if found else ()


def kernel_arg_names(call) -> list[str]:
    """The names of a kernel's parameters (x_ref, o_ref, ...), where JAX kept them."""
    return list(getattr(getattr(call.kernel, "debug_info", None), "arg_names", None) or ())


def _operand_names(kernel, mapping) -> list[str]:
    names = getattr(getattr(kernel, "debug_info", None), "arg_names", None)
    if names is not None and hasattr(mapping, "slice_block_ops"):
        picked = list(names[mapping.slice_block_ops])
        if len(picked) == len(mapping.block_mappings) and all(picked):
            return picked
    return [str(b.origin) for b in mapping.block_mappings]


def _pallas_call_primitive():
    from jax._src.pallas import pallas_call

    return pallas_call.pallas_call_p


# -------------------------------------------------------- the interpreter ---

def set_interpret_mode(on: bool) -> None:
    from jax.experimental.pallas import tpu as pltpu

    pltpu.set_tpu_interpret_mode(interpret_params() if on else None)
    if on:
        defer_gpu_interpreter()


GPU_INTERPRETER = "jax._src.pallas.mosaic_gpu.interpret.interpret_pallas_call"


def defer_gpu_interpreter() -> None:
    """JAX imports its Mosaic GPU interpreter whenever it lowers any kernel in interpret
    mode, only to ask whether the kernel's params are that interpreter's (0.2 s, a third
    of a basics test on a laptop). A stand-in takes the module's place until one of its
    names is used (a Mosaic GPU kernel, interpreted), which loads it whole. Where the
    module is loaded already, or this JAX has none, nothing changes."""
    import importlib.util

    if GPU_INTERPRETER in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(GPU_INTERPRETER)
    except ImportError:
        return
    if spec is None:
        return
    package, _, name = GPU_INTERPRETER.rpartition(".")
    stand_in = _Deferred(GPU_INTERPRETER)
    stand_in.__spec__ = spec
    sys.modules[GPU_INTERPRETER] = stand_in
    setattr(sys.modules[package], name, stand_in)


class _Deferred(type(sys)):
    """A module not loaded yet: the first name asked of it loads the real one (which
    then replaces it in sys.modules and in its package) and answers from it."""

    def __getattr__(self, attribute):
        import importlib

        if attribute.startswith("__"):
            raise AttributeError(attribute)
        package, _, name = self.__name__.rpartition(".")
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        real = importlib.import_module(self.__name__)
        setattr(sys.modules[package], name, real)
        self.__dict__.update(real.__dict__)
        return getattr(real, attribute)


def interpret_params():
    """Interpret mode that makes silent TPU bugs loud: races reported, fresh buffers
    NaN, out-of-bounds reads an error."""
    import inspect

    from jax.experimental.pallas import tpu as pltpu

    fields = inspect.signature(pltpu.InterpretParams).parameters
    extra = {"on_race": "raise"} if "on_race" in fields else {}
    return pltpu.InterpretParams(detect_races=True, uninitialized_memory="nan",
                                 out_of_bounds_reads="raise", **extra)


def tpu_chip():
    """A context in which JAX sees a TPU v5e, as far as tracing and lowering ask
    (``pltpu.emit_pipeline`` picks its DMA tiling by the chip's generation)."""
    import jax

    if not hasattr(jax.sharding, "AbstractDevice") or _mesh_in_context():
        return contextlib.nullcontext()
    try:
        device = jax.sharding.AbstractDevice(device_kind="TPU v5 lite", num_cores=1,
                                             platform="tpu")
    except TypeError:  # JAX < 0.9 has no platform field
        device = jax.sharding.AbstractDevice(device_kind="TPU v5 lite", num_cores=1)
    # Auto axes, as every array made outside this context has: with JAX 0.11's default
    # (Explicit) an operand from outside (a scalar-prefetch table) fails to slice.
    auto = getattr(getattr(jax.sharding, "AxisType", None), "Auto", None)
    axis_types = {"axis_types": (auto,)} if auto is not None else {}
    return jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device, **axis_types))


def _mesh_in_context() -> bool:
    """Whether the caller set a mesh (``jax.set_mesh``): a program over several chips
    keeps it, since a shard_map must run in the mesh of its context."""
    import jax

    getter = getattr(jax.sharding, "get_abstract_mesh", None)
    return getter is not None and not getter().empty


def without_mesh():
    """A context with no mesh set (the kit's own known-good kernels run there, even in
    a test that set one for a program over several chips)."""
    import jax
    from .frozen import np

    return jax.set_mesh(jax.sharding.Mesh(np.empty((), dtype=object), ()))


def with_kernels(eqn, params_of):
    """``eqn`` (a shard_map) with ``params_of(kernel)`` set on every kernel in its body
    (nested shard_maps too): a kernel inside a shard_map is bound with the shard_map,
    not one by one."""
    body = eqn.params.get("jaxpr")
    if not is_jaxpr(body):
        return eqn
    return eqn.replace(params=dict(eqn.params, jaxpr=_kernels_replaced(body, params_of)))


def _kernels_replaced(jaxpr, params_of):
    if getattr(jaxpr, "jaxpr", jaxpr) is not jaxpr:   # a ClosedJaxpr
        return jaxpr.replace(jaxpr=_kernels_replaced(jaxpr.jaxpr, params_of))
    eqns = []
    for inner in jaxpr.eqns:
        if is_kernel(inner):
            inner = inner.replace(params=dict(inner.params, **params_of(inner)))
        elif inner.primitive.name == "shard_map":
            inner = with_kernels(inner, params_of)
        eqns.append(inner)
    return jaxpr.replace(eqns=eqns)


def traced_for_tpu():
    """Where the default device is not a TPU: a context in which a learner's code is
    traced as for a TPU v5e (the kernels are TPU kernels, run in interpret mode)."""
    import jax

    if jax.devices()[0].platform == "tpu" or _GPU_KERNELS.get():
        return contextlib.nullcontext()
    return tpu_chip()


@contextlib.contextmanager
def compiled_for_tpu():
    """Inside: pallas_call lowers for a real TPU (a v5e, as far as the lowering asks)
    even on a CPU and where interpret mode is set."""
    from jax.experimental.pallas import tpu as pltpu

    with pltpu.force_tpu_interpret_mode(None), tpu_chip():
        yield


def reset_interpreter() -> None:
    if "jax" not in sys.modules:
        return
    from jax.experimental.pallas import tpu as pltpu

    pltpu.reset_tpu_interpret_mode_state()
    reset_gpu_interpreter()


def abort_interpreter(why: str) -> bool:
    """Ends every wait of the simulated chips, after the kit's time bound: a kernel that
    waits forever (a signal nobody sends) would otherwise keep its device threads
    waiting after the test, and hang the process at exit.

    Newer releases have a switch for it: the run is marked failed, every waiting device
    raises, a device that starts the kernel later fails at once, and the last one to
    leave clears the interpreter's state; this waits a few seconds for that. Older
    releases have none: every semaphore is filled and the interpreter's barriers are
    broken, which ends the waits that are there. Either way a device thread may be left
    behind (one that had not started the kernel yet): ``runtime`` remembers the abort,
    and the process ends without waiting for it. Returns whether the kernel ran on
    several simulated chips (only then can a thread be left behind)."""
    import time

    module, shared = _interpreter_state()
    if shared is None:
        return False
    several = int(getattr(shared, "num_devices", 1) or 1) > 1
    if hasattr(shared, "set_failed"):
        shared.set_failed(RuntimeError(why), top_level=False)
        deadline = time.monotonic() + 5
        while _interpreter_state()[1] is shared and time.monotonic() < deadline:
            time.sleep(0.05)
        return several
    for sem in list(getattr(shared, "sem", {}).values()):
        with sem.cv:
            sem.count_by_core[:] = 1 << 30
            sem.cv.notify_all()
    for name in ("barrier", "clean_up_barrier"):
        barrier = getattr(shared, name, None)
        if barrier is not None and hasattr(barrier, "abort"):
            barrier.abort()
    return several


def _interpreter_state():
    """(the interpreter's module, its shared state of simulated chips, or None)."""
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as module
    except ImportError:
        return None, None
    if hasattr(module, "_shared_memory"):
        return module, module._shared_memory
    try:   # JAX < 0.9 keeps it in the shared_memory module
        from jax._src.pallas.mosaic.interpret import shared_memory as memory
    except ImportError:
        return module, None
    return module, getattr(memory, "_shared_memory", None)


def drop_failed_tokens() -> None:
    """Forgets the effect tokens of a computation that failed mid-kernel.

    Otherwise JAX hands the failed token to the next computation with the same
    side effects (the next test's kernel fails for no reason of its own) and
    waits on it at exit (a long traceback after the summary).
    """
    try:
        from jax._src import dispatch
    except ImportError:
        return
    tokens = getattr(dispatch, "runtime_tokens", None)
    for name in ("clear", "reset"):
        if tokens is not None and hasattr(tokens, name):
            getattr(tokens, name)()
            return


def _race_detector():
    try:
        from jax._src.pallas.mosaic.interpret import race_detection_state as detector
    except ImportError:
        return None
    return detector


def _reports_races_by_raising() -> bool:
    import inspect

    from jax.experimental.pallas import tpu as pltpu

    return "on_race" in inspect.signature(pltpu.InterpretParams).parameters


RACE_MARK = "RACE DETECTED"


@contextlib.contextmanager
def recording_races(found: list):
    """Collects the interpreter's race reports (printed by older JAX; raised as
    errors by JAX >= 0.12, which ``race_in`` finds) into ``found``."""
    detector = _race_detector()
    if detector is None or _reports_races_by_raising():
        yield found
        return

    def record(*args, **kwargs):
        found.append(" ".join(str(a) for a in args).strip())

    previous = vars(detector).get("print")
    detector.print = record  # the detector reports each race with print()
    try:
        yield found
    finally:
        if previous is None:
            del detector.print
        else:
            detector.print = previous


def race_in(error: BaseException) -> str | None:
    """The race report inside an error raised by the interpreter, if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = str(error)
        if RACE_MARK in text:
            return text[text.index(RACE_MARK):]
        error = error.__cause__ or error.__context__
    return None


def interpreter_saw_race() -> bool:
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call
    except ImportError:
        return False
    races = getattr(interpret_pallas_call, "races", None)
    return bool(races is not None and races.races_found)


def fix_kernel_trace_cache() -> None:
    """Makes every kernel trace fresh. JAX 0.11 caches a kernel's trace without the
    grid it was traced for, and ``pl.num_programs`` is folded into that trace as a
    constant: the same kernel called again with another grid reuses the first
    grid's sizes (a sum over 4 grid steps stops after 2). A fresh function object
    per trace misses that cache; on other releases it changes nothing."""
    try:
        from jax._src.pallas import pallas_call as module
    except ImportError:
        return
    original = getattr(module, "_trace_kernel_to_jaxpr", None)
    if original is None or hasattr(original, "pallas_hints"):
        return

    @functools.wraps(original)
    def fresh_trace(fun, *args, **kwargs):
        return original(functools.partial(fun), *args, **kwargs)

    fresh_trace.pallas_hints = True
    module._trace_kernel_to_jaxpr = fresh_trace


# ------------------------------------------------------ Mosaic GPU (Hopper) ---
# Mosaic GPU kernels (plgpu.kernel) run on a CPU in JAX's GPU interpret mode (JAX >=
# 0.11: shared memory, barriers, TMA copies and races simulated) and compiled on a
# Hopper GPU. Both modes share the config entry that TPU interpret mode sets for the
# whole process, so a Mosaic GPU test sets its own mode locally, for its duration.
# Each feature a puzzle uses is probed once, by a small known-good kernel, the first
# time a test needs it: where the probe fails, the tests that need it end as "cannot
# be verified on JAX X" and the rest of the kit runs.

_GPU_KERNELS = contextvars.ContextVar("pallas_hints_gpu_kernels", default=False)
GPU_INTERPRET = "Mosaic GPU interpret mode"
GPU_FEATURES = {
    "kernels": "plgpu.kernel with a grid and SMEM scratch",
    "tma": "TMA copies with barriers",
    "pipeline": "plgpu.emit_pipeline",
    "wgmma": "plgpu.wgmma with swizzled SMEM operands",
    "warpgroups": "several warpgroups with barriers",
}


def gpu_interpret_params():
    """GPU interpret mode that makes silent GPU bugs loud: races raised, fresh buffers
    NaN, out-of-bounds reads an error."""
    import inspect

    from jax.experimental.pallas import mosaic_gpu as plgpu

    wanted = {"detect_races": True, "on_race": "raise", "uninitialized_memory": "nan",
              "out_of_bounds_reads": "raise"}
    fields = inspect.signature(plgpu.InterpretGPUParams).parameters
    return plgpu.InterpretGPUParams(**{k: v for k, v in wanted.items() if k in fields})


@contextlib.contextmanager
def mosaic_gpu_kernels(interpret: bool):
    """Inside: plgpu.kernel runs in GPU interpret mode (``interpret``) or compiled for
    the GPU, whatever TPU interpret mode the process has set; learner code is traced
    as is, not as for a TPU."""
    from jax.experimental.pallas import tpu as pltpu

    token = _GPU_KERNELS.set(True)
    try:
        try:
            from jax.experimental.pallas import mosaic_gpu as plgpu
        except Exception:   # a jaxlib without Mosaic GPU
            plgpu = None
        if interpret and hasattr(plgpu, "force_gpu_interpret_mode"):
            mode = plgpu.force_gpu_interpret_mode(gpu_interpret_params())
        elif interpret:   # nothing to interpret with (a broken chapter file runs first)
            mode = contextlib.nullcontext()
        else:   # both modes live in one config entry: clearing it means compiled
            mode = pltpu.force_tpu_interpret_mode(None)
        with mode:
            yield
    finally:
        _GPU_KERNELS.reset(token)


def gpu_interpret_missing(feature: str = "kernels") -> str | None:
    """Why this JAX cannot run ``feature`` (a key of GPU_FEATURES) of Mosaic GPU in
    interpret mode on a CPU, or None."""
    switched_off = [n.strip() for n in os.environ.get(MISSING_ENV, "").split(",")]
    if GPU_INTERPRET in switched_off:
        return "switched off by the kit's own tests"
    try:
        from jax.experimental.pallas import mosaic_gpu as plgpu
    except Exception as error:   # a jaxlib without Mosaic GPU
        return f"jax.experimental.pallas.mosaic_gpu does not import ({error})"
    if not hasattr(plgpu, "InterpretGPUParams"):
        return "plgpu.InterpretGPUParams is missing: GPU interpret mode came with JAX 0.11"
    for needed in ("kernels", feature):
        why = _gpu_probe(needed)
        if why:
            return f"{GPU_FEATURES[needed]}: {why}"
    return None


@functools.lru_cache(maxsize=None)
def _gpu_probe(feature: str) -> str | None:
    """Runs the known-good kernel for ``feature`` in GPU interpret mode: None if it
    gives the right values, else what went wrong."""
    import jax

    from .frozen import np

    try:
        with mosaic_gpu_kernels(interpret=True):
            yours, expected = _GPU_PROBES[feature]()
            yours = np.asarray(jax.block_until_ready(yours), np.float64)
    except Exception as error:
        reset_gpu_interpreter()
        drop_failed_tokens()
        text = str(error).strip().splitlines()
        return f"{type(error).__name__}: {text[-1] if text else ''}"[:300]
    if not np.allclose(yours, expected, rtol=1e-2, atol=1e-2):
        return "a known-good kernel gave wrong values"
    return None


def _probe_kernels():
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    from .frozen import np

    x = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)

    def body(x_ref, o_ref, tile):
        rows = pl.ds(lax.axis_index("blocks") * 8, 8)
        tile[...] = 2 * x_ref[rows]
        o_ref[rows] = tile[...] - 3

    run = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                       grid_names=("blocks",), scratch_types=[plgpu.SMEM((8, 128), jnp.float32)])
    return jax.jit(run)(x), 2 * x - 3


def _probe_tma():
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas import mosaic_gpu as plgpu

    from .frozen import np

    x = np.arange(64 * 128, dtype=np.float32).reshape(64, 128)

    def body(x_ref, o_ref, tile, landed):
        plgpu.copy_gmem_to_smem(x_ref, tile, landed)
        plgpu.barrier_wait(landed)
        tile[...] = tile[...] * 2
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(tile, o_ref)
        plgpu.wait_smem_to_gmem(0)

    run = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                       scratch_types=[plgpu.SMEM(x.shape, jnp.float32), plgpu.Barrier()])
    return jax.jit(run)(x), 2 * x


def _probe_pipeline():
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas import mosaic_gpu as plgpu

    from .frozen import np

    x = np.arange(4 * 64 * 128, dtype=np.float32).reshape(256, 128) / 1000

    def body(x_ref, o_ref):
        def step(indices, tile, running):
            running_now = running + tile[...]
            plgpu.commit_smem()
            return running_now

        o_ref[...] = plgpu.emit_pipeline(
            step, grid=(4,), in_specs=[plgpu.BlockSpec((64, 128), lambda i: (i, 0))],
            max_concurrent_steps=2, init_carry=jnp.zeros((64, 128), jnp.float32))(x_ref)

    run = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((64, 128), jnp.float32))
    return jax.jit(run)(x), x.reshape(4, 64, 128).sum(0)


def _probe_wgmma():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    from .frozen import np

    a = (np.arange(64 * 64) % 7 - 3).reshape(64, 64).astype(np.float16)
    b = (np.arange(64 * 64) % 5 - 2).reshape(64, 64).astype(np.float16)
    swizzled = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))

    def body(a_ref, b_ref, o_ref, a_tile, b_tile, landed):
        plgpu.copy_gmem_to_smem(a_ref, a_tile, landed)
        plgpu.copy_gmem_to_smem(b_ref, b_tile, landed)
        plgpu.barrier_wait(landed)

        def product(acc):
            plgpu.wgmma(acc, a_tile, b_tile)
            return acc[...]

        o_ref[...] = pl.run_scoped(product, plgpu.ACC((64, 64), jnp.float32))

    run = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((64, 64), jnp.float32),
                       scratch_types=[plgpu.SMEM((64, 64), jnp.float16, transforms=swizzled),
                                      plgpu.SMEM((64, 64), jnp.float16, transforms=swizzled),
                                      plgpu.Barrier(num_arrivals=2)])
    return jax.jit(run)(a, b), a.astype(np.float64) @ b.astype(np.float64)


def _probe_warpgroups():
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    from .frozen import np

    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)

    def body(x_ref, o_ref, tile, ready):
        @pl.when(lax.axis_index("wg") == 0)
        def produce():
            tile[...] = x_ref[...] + 1
            plgpu.barrier_arrive(ready)

        @pl.when(lax.axis_index("wg") == 1)
        def consume():
            plgpu.barrier_wait(ready)
            o_ref[...] = tile[...] * 2

    run = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), num_threads=2,
                       thread_name="wg", scratch_types=[plgpu.SMEM(x.shape, jnp.float32),
                                                        plgpu.Barrier()])
    return jax.jit(run)(x), (x + 1) * 2


_GPU_PROBES = {"kernels": _probe_kernels, "tma": _probe_tma, "pipeline": _probe_pipeline,
               "wgmma": _probe_wgmma, "warpgroups": _probe_warpgroups}


def reset_gpu_interpreter() -> None:
    """Clears GPU interpret mode's shared state (a failed kernel leaves it dirty)."""
    if "jax.experimental.pallas.mosaic_gpu" not in sys.modules:
        return
    try:
        from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks
    except ImportError:
        return
    reset = getattr(gpu_callbacks, "reset_gpu_interpret_mode_state", None)
    if reset is not None:
        reset()


def abort_gpu_kernel(why: str) -> bool:
    """Fails the Mosaic GPU kernel that GPU interpret mode is running, if any: its
    threads waiting on barriers wake up and the kernel raises ``why`` (a kernel waiting
    on a barrier nothing completes would otherwise wait forever, out of reach of a
    signal handler). Returns whether a kernel was running."""
    try:
        from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks
    except ImportError:
        return False
    memory = getattr(gpu_callbacks, "_shared_memory", None)
    if memory is None or not hasattr(memory, "set_failed"):
        return False
    memory.set_failed(RuntimeError(why), None, top_level=False)
    return True


def wgmma_operands(jaxpr) -> list[dict]:
    """Per plgpu.wgmma in ``jaxpr`` (nested jaxprs included): {"a": ..., "b": ...}, each
    None for an operand in registers, else the SMEM ref's layout: {"swizzle": bytes or
    None, "tiling": tile shape or None}; and "eqn", the equation."""
    found = []
    for eqn in equations(jaxpr):
        if eqn.primitive.name == "wgmma_ref":
            entry = {"eqn": eqn}
            for operand, var in zip(("a", "b"), eqn.invars[1:3]):
                tree = eqn.params.get(f"{operand}_transforms_tree")
                if not is_ref(getattr(var, "aval", None)):
                    entry[operand] = None
                    continue
                layout = {"swizzle": None, "tiling": None}
                try:
                    transforms = tree.unflatten([None] * tree.num_leaves) if tree else ()
                except Exception:
                    transforms = ()
                for transform in transforms or ():
                    if hasattr(transform, "swizzle"):
                        layout["swizzle"] = int(transform.swizzle)
                    if hasattr(transform, "tiling"):
                        layout["tiling"] = tuple(int(t) for t in transform.tiling)
                entry[operand] = layout
            found.append(entry)
    return found


def pipeline_buffers(jaxpr) -> list[tuple]:
    """The shapes of the SMEM buffers that plgpu.emit_pipeline allocates in ``jaxpr``:
    one per operand it copies, (slots, *block shape) each."""
    return _scoped_smem(jaxpr, by_pipeline=True)


def smem_allocations(jaxpr) -> list[tuple]:
    """The shapes of the SMEM buffers (barriers aside) that a Mosaic GPU kernel allocates
    itself (scratch_types, pl.run_scoped), not those of plgpu.emit_pipeline."""
    return _scoped_smem(jaxpr, by_pipeline=False)


def _scoped_smem(jaxpr, by_pipeline: bool) -> list[tuple]:
    """The shapes of the SMEM buffers (barriers aside) that the run_scoped allocations in
    ``jaxpr`` make, those of plgpu.emit_pipeline's or the others."""
    found = []
    for eqn in equations(jaxpr):
        view = control(eqn)
        if isinstance(view, Scoped) and _made_by_gpu_pipeline(eqn) == by_pipeline:
            for var in view.body[0].invars:
                if memory_space(var.aval) == "smem" and "barrier" not in str(var.aval.dtype):
                    found.append(tuple(int(d) for d in var.aval.shape))
    return found


def gmem_accesses(jaxpr) -> list:
    """The loads and stores (get, swap equations) of a Mosaic GPU kernel that read or
    write a GMEM ref directly, not through SMEM."""
    return [eqn for eqn in equations(jaxpr)
            if eqn.primitive.name in ("get", "swap") and memory_space(eqn.invars[0].aval) == "gmem"]


def gpu_unlowered(jaxpr) -> list:
    """The equations of a Mosaic GPU kernel whose primitive no Mosaic GPU lowering rule
    knows, in any of its semantics (a ``jnp.dot``: the tensor core is ``plgpu.wgmma``):
    on a Hopper the kernel does not compile. Empty where this JAX keeps no such table."""
    try:
        from jax._src.pallas.mosaic_gpu import lowering
        from jax._src.state import discharge
        rules = set().union(*(table for table in lowering.mosaic_lowering_rules.values()))
        rules |= set(discharge._discharge_rules)   # a ref primitive (wgmma_ref) becomes one
    except Exception:
        return []
    names = {getattr(p, "name", None) for p in rules}
    return [eqn for eqn in equations(jaxpr) if eqn.primitive not in rules
            and eqn.primitive.name not in names]


def _made_by_gpu_pipeline(eqn) -> bool:
    for path, _ in frames(eqn):
        path = path.replace("\\", "/")
        if path.endswith("pallas/mosaic_gpu/pipeline.py"):
            return True
        if "/jax/_src/" not in path:
            return False
    return False


# -------------------------------------------------------------- compiling ---

def _compiler():
    """JAX's one entry point for compiling a lowered program, if its signature is
    the one the compile cache knows."""
    import inspect

    try:
        from jax._src import compiler
    except ImportError:
        return None
    original = getattr(compiler, "compile_or_get_cached", None)
    if original is None:
        return None
    original = getattr(original, "pallas_hints_original", original)
    expected = ["backend", "computation", "devices", "compile_options", "host_callbacks",
                "executable_devices"]
    if list(inspect.signature(original).parameters)[:6] != expected:
        return None
    return compiler


def wrap_compiler(hook) -> dict | None:
    """Routes every compile through ``hook(backend, computation, options, callbacks,
    executable_devices, compile)``, where ``compile(options)`` compiles as JAX
    would. Returns the state dict shared with an earlier wrap (a module imported
    twice), or None where the compiler is not the one expected."""
    compiler = _compiler()
    if compiler is None:
        return None
    current = compiler.compile_or_get_cached
    if hasattr(current, "pallas_hints_state"):
        return current.pallas_hints_state
    original = current

    def compile_or_get_cached(backend, computation, devices, compile_options,
                              host_callbacks, executable_devices, *rest, **kw):
        def compile(options):
            return original(backend, computation, devices, options, host_callbacks,
                            executable_devices, *rest, **kw)

        return compile_or_get_cached.pallas_hints_hook(
            backend, computation, compile_options, host_callbacks, executable_devices, compile)

    compile_or_get_cached.pallas_hints_state = {}
    compile_or_get_cached.pallas_hints_hook = hook
    compile_or_get_cached.pallas_hints_original = original
    compiler.compile_or_get_cached = compile_or_get_cached
    return compile_or_get_cached.pallas_hints_state


def program_text(computation) -> str:
    """A lowered program as text, without source locations (stable across edits
    that only move lines)."""
    from jax._src.interpreters import mlir

    return mlir.module_to_string(computation, enable_debug_info=False)


def callbacks_load_as_objects() -> bool:
    """Whether this jaxlib loads a stored executable with Python callables as its
    host callbacks (jaxlib < 0.9 takes capsules only)."""
    from jax._src.lib import xla_client

    return "Callable" in (xla_client.Client.deserialize_executable.__doc__ or "Callable")


def load_executable(backend, data: bytes, executable_devices, options, callbacks):
    """A compiled program stored by ``serialize_executable``, given this run's host
    callbacks (raises TypeError on a jaxlib that takes them as capsules only)."""
    return backend.deserialize_executable(data, executable_devices, options,
                                          host_callbacks=list(callbacks))


def serialize_executable(backend, executable) -> bytes:
    return (executable.serialize() if hasattr(executable, "serialize")
            else backend.serialize_executable(executable))
