"""``--cost`` at the sizes that matter: a test's ``tpu``-marked configuration, counted here.

A test's CPU configurations are tiny (a few blocks per axis, so that a learner's run
takes seconds): every one of them is memory-bound and takes nanoseconds, which teaches
nothing about block sizes. Its ``tpu``-marked configuration is the size a kernel runs at,
and cannot run here. So, without a TPU, ``--cost`` projects it: the test function runs
with its ``tpu`` parameters until it calls ``measure``, and there the kit traces the
learner's function (and the reference's, to compare) at that size, evaluates the index
maps over every grid step and walks the kernels' integer side
(``walk.projected_counts``) — nothing of the kernels' arithmetic runs, nothing is
checked, and the test stops.

What the test draws before it measures must not cost what the real sizes would: the
projection's ``rng`` draws integers (group sizes, ids, masks: the kit needs their
values) and small arrays as usual, and stands for a large float array with a
``Placeholder``: a shape and a dtype that NumPy and ``jax.numpy`` operations carry
through (shapes worked out by ``jax.eval_shape``) without computing anything. A test
that needs a large array's values before it measures is not projected, and says why.
"""
from __future__ import annotations

import contextlib
import operator
import signal
import threading

from .frozen import np

from . import checking

DRAWN_MOST = 1 << 16       # elements of a float array the projection still draws
SECONDS = 30               # the longest a projection may take


class Projected(Exception):
    """Raised by ``measure`` in a projection: the costs of the kernels it traced."""

    def __init__(self, costs: list):
        super().__init__("projected")
        self.costs = costs


class Unprojectable(Exception):
    """The test needs something a projection does not compute."""


_ACTIVE: list = []         # (config label,) while a projection runs


def active() -> bool:
    return bool(_ACTIVE)


def run(function, params: dict, config: str, seed: int, test_id: str):
    """Runs a test function with its ``tpu`` parameters as a projection. Returns (costs,
    why not): the costs of what its first ``measure`` traced, or a reason."""
    rng = ProjectingRng(checking.Rng.for_test(test_id, seed).seed, seed)
    import inspect

    wanted = inspect.signature(function).parameters
    kwargs = {name: value for name, value in params.items() if name in wanted}
    if "rng" in wanted:
        kwargs["rng"] = rng
    if set(wanted) - set(kwargs):
        return [], f"the test takes fixtures a projection does not make: {sorted(set(wanted) - set(kwargs))}"
    _ACTIVE.append(config)
    try:
        with _time_limit(SECONDS):
            function(**kwargs)
    except Projected as done:
        return done.costs, ""
    except Unprojectable as why:
        return [], str(why)
    except _TimeUp:
        return [], f"the test took more than {SECONDS} s to reach its measure()"
    except Exception as error:   # the learner's code, or the test's, at that size
        return [], f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    finally:
        _ACTIVE.pop()
        checking.measured_in_test(forget=True, tpu=True)
    return [], "the test measured no kernel"


def intercept(fn, args: tuple, static: dict):
    """``measure`` in a projection: the cost of ``fn``'s kernels at these sizes, and of the
    reference's function of the same name beside them; raises ``Projected``."""
    from . import cost

    config = _ACTIVE[-1]
    shaped = _shapes(args)
    costs = []
    for whose, function in _versions(fn):
        traced = checking._trace(function, shaped, static)
        costs += cost.project(traced, shaped, whose, config)
    raise Projected(costs)


def _versions(fn):
    """(whose, function): the function measured, and the reference's of the same name
    where the function is a learner's (exercises/<chapter>.py) and the reference is here."""
    yield ("yours" if str(getattr(fn, "__module__", "")).startswith("exercises.")
           else "reference"), fn
    module = str(getattr(fn, "__module__", ""))
    if not module.startswith("exercises."):
        return
    from pathlib import Path

    from . import chapters

    here = Path(getattr(__import__("sys").modules.get(module), "__file__", "") or "")
    path = here.parent.parent / "reference" / here.name
    if not path.exists():
        return
    loaded = path.resolve() in chapters._loaded
    try:
        reference = chapters._execute(path, f"reference.{here.stem}")
    except Exception:
        return
    finally:
        if not loaded:
            chapters._loaded.discard(path.resolve())
    other = getattr(reference, getattr(fn, "__name__", ""), None)
    if callable(other):
        yield "reference", other


def _shapes(args):
    """Placeholders (and large float arrays) as ShapeDtypeStructs; the rest as they are."""
    import jax

    def leaf(x):
        if isinstance(x, Placeholder):
            return jax.ShapeDtypeStruct(x.shape, x.dtype)
        return x

    return jax.tree_util.tree_map(leaf, args, is_leaf=lambda x: isinstance(x, Placeholder))


class _TimeUp(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int):
    if threading.current_thread() is not threading.main_thread() \
            or not hasattr(signal, "setitimer"):
        yield
        return

    def up(*_):
        raise _TimeUp()

    before = signal.signal(signal.SIGALRM, up)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


# ------------------------------------------------------------- placeholders ---

class ProjectingRng(checking.Rng):
    """The test's ``rng``, drawing placeholders for large float arrays."""

    def normal(self, shape, dtype="float32", scale: float = 1.0):
        if _size(shape) > DRAWN_MOST:
            return Placeholder(shape, dtype)
        return super().normal(shape, dtype, scale)

    def uniform(self, shape, low: float = 0.0, high: float = 1.0, dtype="float32"):
        if _size(shape) > DRAWN_MOST and "int" not in str(dtype):
            return Placeholder(shape, dtype)
        return super().uniform(shape, low, high, dtype)


def _size(shape) -> int:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return int(np.prod(shape, dtype=np.int64))


class Placeholder:
    """A large array of known shape and dtype and unknown values. Operations on it give
    placeholders of the shapes they would have (``jax.eval_shape`` of the ``jax.numpy``
    operation of the same name); reading a value raises ``Unprojectable``."""

    __array_priority__ = 1000

    def __init__(self, shape, dtype):
        import jax.numpy as jnp

        self.shape = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
        self.dtype = np.dtype(jnp.dtype(dtype))

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: _size(self.shape))
    nbytes = property(lambda self: self.size * self.dtype.itemsize)
    itemsize = property(lambda self: self.dtype.itemsize)
    T = property(lambda self: _apply(lambda a: a.T, self))

    def __repr__(self):
        return f"Placeholder({self.shape}, {self.dtype})"

    def __len__(self):
        return self.shape[0]

    def __array__(self, *args, **kwargs):
        raise Unprojectable("the test reads the values of an array drawn at the TPU size "
                            "before it measures")

    def __float__(self):
        return self.__array__()

    __int__ = __bool__ = __index__ = __float__

    def __getitem__(self, index):
        return _apply(lambda a: a[_unwrap(index)], self)

    def __setitem__(self, index, value):   # values are not kept: nothing to write
        pass

    def astype(self, dtype, *args, **kwargs):
        return Placeholder(self.shape, dtype)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def method(*args, **kwargs):
            return _apply(lambda a, *rest: getattr(a, name)(*rest, **kwargs), self, *args)
        return method

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        import jax.numpy as jnp

        fn = getattr(jnp, ufunc.__name__, None)
        if fn is None or method not in ("__call__", "reduce"):
            raise Unprojectable(f"np.{ufunc.__name__}.{method} on an array drawn at the TPU "
                                "size")
        if method == "reduce":
            return _apply(lambda a: getattr(jnp, {"add": "sum", "multiply": "prod",
                                                  "maximum": "max", "minimum": "min"}
                                            .get(ufunc.__name__, ufunc.__name__))(a, **kwargs),
                          inputs[0])
        kwargs.pop("out", None)
        return _apply(lambda *xs: fn(*xs, **kwargs), *inputs)

    def __array_function__(self, func, types, args, kwargs):
        import jax.numpy as jnp

        fn = getattr(jnp, func.__name__, None)
        if fn is None:
            raise Unprojectable(f"np.{func.__name__} on an array drawn at the TPU size")
        return _apply(lambda *xs: fn(*xs, **kwargs), *args)


def _binary(op, reflected=False):
    def method(self, other):
        return _apply((lambda a, b: op(b, a)) if reflected else op, self, other)
    return method


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and",
              "or", "xor", "lt", "le", "gt", "ge", "eq", "ne"):
    _op = getattr(operator, _name if _name not in ("and", "or") else f"{_name}_")
    setattr(Placeholder, f"__{_name}__", _binary(_op))
    if _name not in ("lt", "le", "gt", "ge", "eq", "ne"):
        setattr(Placeholder, f"__r{_name}__", _binary(_op, reflected=True))
Placeholder.__neg__ = lambda self: _apply(operator.neg, self)
Placeholder.__abs__ = lambda self: _apply(abs, self)
Placeholder.__invert__ = lambda self: _apply(operator.invert, self)
Placeholder.__hash__ = object.__hash__


def _unwrap(index):
    return index


def _apply(fn, *args):
    """``fn`` on the shapes of ``args`` (placeholders abstract, the rest as they are):
    a placeholder of the result's shape and dtype (a tuple of them for several)."""
    import jax

    wide = any(isinstance(a, Placeholder) and a.dtype == np.float64 for a in args)
    slots = [n for n, a in enumerate(args) if isinstance(a, Placeholder)]
    shapes = [jax.ShapeDtypeStruct(args[n].shape, args[n].dtype) for n in slots]

    def on(*abstract):
        full = list(args)
        for n, value in zip(slots, abstract):
            full[n] = value
        return fn(*full)

    try:
        out = jax.eval_shape(on, *shapes)
    except Unprojectable:
        raise
    except Exception as error:
        raise Unprojectable(f"an operation on an array drawn at the TPU size that the "
                            f"projection cannot follow ({type(error).__name__})") from None

    def placeholder(s):
        dtype = np.float64 if wide and np.dtype(s.dtype) == np.float32 else s.dtype
        return Placeholder(s.shape, dtype)

    return jax.tree_util.tree_map(placeholder, out)
