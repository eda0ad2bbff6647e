"""The compile cache: an interpret-mode program (it calls back into Python)
compiled in one run is loaded, not compiled, in the next; a damaged entry is
compiled afresh; results do not change."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

from pytest_pallas_hints import checking, compile_cache, program, runtime


def double(x):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(2,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)


class Compiles:
    """XLA compiles of programs that call back into Python since it was made (the
    interpreter's own helpers have no callbacks), as the compile cache counts them."""

    def __init__(self):
        self.start = compile_cache._state["compiled"]

    def __len__(self):
        return compile_cache._state["compiled"] - self.start


@pytest.fixture
def cache(tmp_path):
    """Interpret mode with the cache in tmp_path, and a count of real compiles."""
    runtime.use_interpret_mode(True)
    compile_cache.install(tmp_path)
    yield tmp_path, Compiles()
    compile_cache.uninstall()


def compile_and_run(x):
    jax.clear_caches()  # as a new pytest process would start
    lowered = jax.jit(double).trace(x).lower()
    assert "callback" in lowered.as_text(), "an interpret-mode program calls back into Python"
    return np.asarray(lowered.compile()(x))


def test_a_program_with_callbacks_compiled_once_is_loaded_the_next_time(cache):
    folder, compiles = cache
    x = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)
    first = compile_and_run(x)
    assert len(compiles) == 1 and list(folder.glob("*.xla"))
    second = compile_and_run(x)
    if not compile_cache._state["load_callbacks"]:
        pytest.skip(f"jaxlib {jax.__version__} takes Python callbacks only as capsules")
    assert len(compiles) == 1, "the second run compiled again instead of loading"
    np.testing.assert_array_equal(first, x * 2)
    np.testing.assert_array_equal(second, x * 2)


def test_another_program_gets_its_own_entry(cache):
    folder, compiles = cache
    if not compile_cache._state["load_callbacks"]:
        pytest.skip(f"jaxlib {jax.__version__} takes Python callbacks only as capsules")
    compile_and_run(np.ones((16, 128), np.float32))
    entries = set(folder.glob("*.xla"))
    compile_and_run(np.ones((16, 128), jnp.bfloat16))
    assert len(compiles) == 2 and set(folder.glob("*.xla")) > entries


def test_a_damaged_entry_is_compiled_afresh(cache):
    folder, compiles = cache
    x = np.ones((16, 128), np.float32)
    compile_and_run(x)
    entries = list(folder.glob("*.xla"))
    for entry in entries:
        entry.write_bytes(b"not an executable")
    np.testing.assert_array_equal(compile_and_run(x), x * 2)
    assert len(compiles) == 2
    assert all(entry.read_bytes() != b"not an executable" for entry in entries)


def test_without_a_folder_nothing_is_kept(cache):
    folder, compiles = cache
    compile_cache.install(None)
    compile_and_run(np.ones((16, 128), np.float32))
    compile_and_run(np.ones((16, 128), np.float32))
    assert len(compiles) == 2 and not list(folder.glob("*.xla"))


def test_the_folder_is_pruned_oldest_first(tmp_path, monkeypatch):
    monkeypatch.setattr(compile_cache, "PRUNE_ABOVE", 3000)
    monkeypatch.setattr(compile_cache, "PRUNE_TO", 2000)
    for age, name in enumerate(["old", "mid", "new"]):
        path = tmp_path / f"{name}.xla"
        path.write_bytes(b"x" * 1000)
        os.utime(path, (1000 + age, 1000 + age))
    (tmp_path / "newest.xla").write_bytes(b"x" * 1000)
    compile_cache.install(tmp_path)
    compile_cache.uninstall()
    assert sorted(p.stem for p in tmp_path.glob("*.xla")) == ["new", "newest"]


def copy_with(index_map, block=(8, 128)):
    def copy(x):
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...]

        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(2,), in_specs=[pl.BlockSpec(block, index_map)],
                              out_specs=pl.BlockSpec(block, lambda i: (i, 0)))(x)
    return copy


@pytest.fixture
def lowerings(tmp_path, monkeypatch):
    """The cache folder in tmp_path; counts real TPU lowerings of learner programs."""
    calls = []
    original = program.lower_for_tpu
    checking._lowering_error()  # the kit's own known-good lowering, done before counting
    monkeypatch.setattr(program, "lower_for_tpu",
                        lambda *a, **k: calls.append(a) or original(*a, **k))
    compile_cache.install(tmp_path)
    yield calls
    compile_cache.uninstall()


def test_a_program_that_lowered_is_not_lowered_again(lowerings):
    from pytest_pallas_hints.checking import lowers_for_tpu

    x = np.ones((16, 128), np.float32)
    lowers_for_tpu(copy_with(lambda i: (i, 0)), x)
    lowers_for_tpu(copy_with(lambda i: (i, 0)), x)
    assert len(lowerings) == 1
    lowers_for_tpu(copy_with(lambda i: (1 - i, 0)), x)  # only an index map differs
    assert len(lowerings) == 2


def test_a_program_that_failed_to_lower_is_checked_every_time(lowerings):
    from pytest_pallas_hints.checking import LoweringFailed, lowers_for_tpu

    x = np.ones((16, 128), np.float32)
    for _ in range(2):
        with pytest.raises(LoweringFailed):
            lowers_for_tpu(copy_with(lambda i: (i, 0), block=(8, 64)), x)
    assert len(lowerings) == 2
