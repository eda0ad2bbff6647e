"""The compatibility module: the supported range, and the upstream faults the kit
works around, reproduced so that a release with the same fault is caught here."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_pallas_hints import checking, jaxcompat, runtime


@pytest.mark.parametrize("version, says", [
    ("0.7.2", "older than this kit supports"),
    (None, "JAX is not installed"),
    ("0.8.0", None), ("0.10.2", None), ("0.11.2", None), ("0.12.0.1", None), ("1.0.0", None),
])
def test_the_supported_range(version, says):
    why = jaxcompat.unsupported(version)
    assert (why is None) if says is None else (says in why)


def test_a_release_known_to_be_wrong_is_refused_by_name(monkeypatch):
    monkeypatch.setitem(jaxcompat.KNOWN_WRONG, "0.99.", "sums over a grid axis are off")
    assert "computes some kernels wrongly (sums over a grid axis are off)" in \
        jaxcompat.unsupported("0.99.1")


def summed_over_the_grid(x, steps):
    """Accumulates `steps` blocks of x over the last grid axis (num_programs decides
    when to store): the pattern JAX 0.11 got wrong on a second grid."""
    def kernel(x_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += x_ref[...]

        @pl.when(pl.program_id(1) == pl.num_programs(1) - 1)
        def _():
            o_ref[...] = acc_ref[...]

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype),
                          grid=(1, steps), in_specs=[pl.BlockSpec((8, 128), lambda i, k: (0, k))],
                          out_specs=pl.BlockSpec((8, 128), lambda i, k: (0, 0)),
                          scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])(x)


def test_one_kernel_run_with_two_grids_in_one_process_sums_every_step():
    """JAX 0.11.x reused the first grid's num_programs for the second call (2 steps
    summed instead of 4, then NaN for 1); jaxcompat.fix_kernel_trace_cache mends it."""
    runtime.use_interpret_mode(True)
    for steps in (2, 4, 1, 3):
        x = np.ones((8, 128 * steps), np.float32)
        out = checking.run(summed_over_the_grid, x, steps=steps, structure=None)
        np.testing.assert_array_equal(np.asarray(out), np.full((8, 128), steps, np.float32))


def test_every_feature_has_a_probe_and_none_fails_on_a_supported_release():
    assert set(jaxcompat.missing()) == set()
    assert set(dict(jaxcompat._probes())) <= set(jaxcompat.FEATURES)


def test_a_switched_off_feature_raises_cannot_verify(monkeypatch):
    monkeypatch.setenv(jaxcompat.MISSING_ENV, "work accounting")
    with pytest.raises(jaxcompat.CannotVerify, match="work accounting is not available"):
        jaxcompat.require("work accounting")
    jaxcompat.require("byte accounting")


def test_a_multiply_by_a_mask_keeps_nan_as_on_a_tpu():
    """XLA on a CPU turns x * (cond).astype(f32) into a select (NaN where the mask is 0
    becomes 0); the kit runs kernels with that multiply kept, as a TPU computes it."""
    import jax
    import jax.numpy as jnp

    def masked(x):
        return x * (jnp.arange(3) < 1).astype(jnp.float32)

    x = jnp.array([1.0, jnp.nan, jnp.inf])
    closed = jax.make_jaxpr(masked)(x)
    kept = jaxcompat.tpu_multiplies(closed)
    on_tpu = jax.jit(lambda x: jax.core.eval_jaxpr(kept.jaxpr, kept.consts, x))(x)[0]
    assert np.asarray(on_tpu)[0] == 1.0 and np.isnan(np.asarray(on_tpu)[1:]).all()


def devices_in_a_fresh_python(code: str, env: dict | None = None) -> str:
    import os
    import subprocess
    import sys

    environment = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES",
                                                                    "XLA_FLAGS")}
    environment.update(env or {})
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environment, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("when", ["before jax is imported", "before its backends start"])
def test_simulated_chips_are_asked_for_before_jax_starts_its_backends(when):
    first = "import jax\n" if when != "before jax is imported" else ""
    out = devices_in_a_fresh_python(
        first + "from pytest_pallas_hints import jaxcompat\n"
        "jaxcompat.simulate_cpu_devices(4)\n"
        "import jax\n"
        "print(len(jax.devices('cpu')), jaxcompat.cpu_devices_missing(4))\n")
    assert out == "4 None"


def test_a_process_that_started_jax_keeps_its_devices_and_says_why():
    out = devices_in_a_fresh_python(
        "import jax\njax.devices()\n"
        "from pytest_pallas_hints import jaxcompat\n"
        "jaxcompat.simulate_cpu_devices(4)\n"
        "print(len(jax.devices('cpu')))\nprint(jaxcompat.cpu_devices_missing(4))\n")
    count, why = out.splitlines()
    assert count == "1" and "started its CPU backend with 1 device before the kit" in why


def test_remote_dmas_are_probed_by_the_tests_that_need_them(monkeypatch):
    if jaxcompat.cpu_devices_missing(2):
        pytest.skip(jaxcompat.cpu_devices_missing(2))
    runtime.use_interpret_mode(True)
    jaxcompat.require("remote DMAs")   # a copy between two simulated chips works here
    assert "remote DMAs" not in jaxcompat.FEATURES   # not probed by every session
    monkeypatch.setenv(jaxcompat.MISSING_ENV, "remote DMAs")
    with pytest.raises(jaxcompat.CannotVerify, match="remote DMAs is not available"):
        jaxcompat.require("remote DMAs")


def test_the_gpu_interpreter_is_loaded_only_when_a_kernel_needs_it():
    """JAX imports its Mosaic GPU interpreter on every interpret-mode lowering (0.2 s a
    process); the kit defers it until one of its names is used, and then it is whole."""
    import subprocess
    import sys

    program = """
import sys
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import pallas as pl
from pytest_pallas_hints import jaxcompat, runtime

runtime.use_interpret_mode(True)
def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1
x = np.zeros((8, 128), np.float32)
out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
assert float(np.asarray(out).min()) == 1.0
name = jaxcompat.GPU_INTERPRETER
print(type(sys.modules[name]).__name__ if name in sys.modules else "absent")
try:
    from jax._src.pallas.mosaic_gpu.interpret import interpret_pallas_call as deferred
except ImportError:
    print("absent")
else:
    print(callable(deferred.interpret_pallas_call), sys.modules[name] is not deferred)
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.split()
    if lines[0] == "absent":   # a JAX without a GPU interpreter: nothing to defer
        return
    assert lines == ["_Deferred", "True", "True"]
