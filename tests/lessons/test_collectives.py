"""pytest_pallas_hints/lessons/collectives.py on its own: the byte check's verdicts at
and around the ring's count (a known wrong schedule, a dtype ratio, too many, too few),
the checks of where copies land and where the kernel ran on stand-ins, the order in which
the ring asks this JAX what it can do, and the ring's byte counts against what the
reference kernels measurably move between simulated chips."""
import functools
import importlib.util
import types
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from pytest_pallas_hints import jaxcompat, runtime
from pytest_pallas_hints.checking import Diagnosed, measure
from pytest_pallas_hints.lessons import collectives as lesson

ROOT = Path(__file__).resolve().parents[2]


def kind(check, *args, **kwargs) -> str:
    """The finding kind of a lesson check ('' where it passes)."""
    try:
        check(*args, **kwargs)
    except Diagnosed as failure:
        return failure.kind
    return ""


# --- the bytes between chips ----------------------------------------------------------

@pytest.mark.parametrize("moved, expected", [
    (4096, ""),
    (6144, "n_steps"),               # the known wrong schedule's count
    (2048, "remote_dtype"),          # half: bf16 blocks where float32 ones travel
    (8192, "remote_dtype"),          # twice
    (1024, "remote_dtype"),          # a quarter
    (16384, "remote_dtype"),         # four times
    (4097, "remote_bytes_high"),
    (3072, "remote_bytes_low"),
    (0, "remote_bytes_low"),         # nothing sent: not a dtype
])
def test_check_remote_bytes_by_hand(moved, expected):
    ran = types.SimpleNamespace(remote_bytes=moved)
    assert kind(lesson.check_remote_bytes, ran, 4096, what="the ring", likely={"n_steps": 6144},
                travels=np.float32) == expected


def test_check_remote_bytes_names_no_dtype_unless_asked():
    ran = types.SimpleNamespace(remote_bytes=2048)
    assert kind(lesson.check_remote_bytes, ran, 4096, what="the ring") == "remote_bytes_low"
    with pytest.raises(Diagnosed) as failed:
        lesson.check_remote_bytes(types.SimpleNamespace(remote_bytes=8192), 4096,
                                  what="the ring", travels="bfloat16")
    assert "exactly 2 times the ring's bytes" in failed.value.says
    assert "wider than bfloat16 (2 bytes an element)" in failed.value.says


# --- where the copies land, where the kernel ran ----------------------------------------

def copies(*pairs, devices=4):
    """A measured run whose device d sent one remote copy to target t, for each (d, t)."""
    site = types.SimpleNamespace(devices=devices)
    return types.SimpleNamespace(
        executed=[types.SimpleNamespace(device=d, site=site) for d, _ in pairs],
        counts=[types.SimpleNamespace(remote=[(t, "x", 512)]) for _, t in pairs])


def test_check_copies_leave_by_hand():
    assert kind(lesson.check_copies_leave, copies((0, 1), (1, 2), (2, 3), (3, 0))) == ""
    assert kind(lesson.check_copies_leave, copies((0, 1), (1, 1))) == "sent_to_itself"
    assert kind(lesson.check_copies_leave, copies((0, 0), devices=1)) == ""   # one chip


def test_check_on_every_device_by_hand():
    def ran(devices):
        return types.SimpleNamespace(program=types.SimpleNamespace(
            sites=[types.SimpleNamespace(devices=devices)] if devices else []))

    assert kind(lesson.check_on_every_device, ran(8), 8) == ""
    assert kind(lesson.check_on_every_device, ran(1), 8) == "not_on_every_device"
    assert kind(lesson.check_on_every_device, ran(0), 8) == ""   # no kernel: the structure says


def test_check_values_or_bytes_says_the_bytes_first_only_for_plain_wrong_values():
    expected = np.arange(16, dtype=np.float32).reshape(4, 4)
    said = []

    def moved():
        said.append("bytes")
        lesson.fail("remote_bytes_low", "your copies move less")

    assert kind(lesson.check_values_or_bytes, expected, expected, moved) == ""
    assert said == []
    noise = np.random.default_rng(0).standard_normal(expected.shape).astype(np.float32)
    assert kind(lesson.check_values_or_bytes, expected + noise, expected, moved) \
        == "remote_bytes_low"
    assert said == ["bytes"]
    with pytest.raises(AssertionError) as known:   # a known wrong answer: its name, no bytes
        lesson.check_values_or_bytes(expected[::-1], expected, moved,
                                     likely={"reversed": expected[::-1]})
    assert known.value.findings()[0].kind == "reversed" and said == ["bytes"]


# --- the ring ---------------------------------------------------------------------------

def test_ring_asks_for_the_puzzle_s_feature_first(monkeypatch):
    asked = []

    def require(feature):
        asked.append(feature)
        raise jaxcompat.CannotVerify(feature, "not on this JAX")

    monkeypatch.setattr(lesson.jaxcompat, "require", require)
    monkeypatch.setattr(lesson.jaxcompat, "cpu_devices_missing",
                        lambda n: asked.append("devices"))
    with pytest.raises(jaxcompat.CannotVerify):
        lesson.ring(4, needs="pl.kernel over a TensorCoreMesh")
    assert asked == ["pl.kernel over a TensorCoreMesh"]


@pytest.fixture
def simulated_chips():
    if jaxcompat.cpu_devices_missing(8):
        pytest.skip(jaxcompat.cpu_devices_missing(8))
    jaxcompat.require("remote DMAs")
    runtime.use_interpret_mode(True)


def test_ring_is_a_mesh_of_n_devices_on_axis_x(simulated_chips):
    mesh = lesson.ring(4)
    assert mesh.devices.size == 4 and mesh.axis_names == (lesson.AXIS,)


def chapter(wrong=None):
    """reference/collectives.py, with tests/mistakes/collectives/<wrong>.py patched in."""
    spec = importlib.util.spec_from_file_location("reference_collectives_lesson",
                                                  ROOT / "reference" / "collectives.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if wrong:
        path = ROOT / "tests" / "mistakes" / "collectives" / f"{wrong}.py"
        exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


def on_ring(fn, n, x):
    mesh = lesson.ring(n)
    everywhere = jax.shard_map(functools.partial(fn, axis_name=lesson.AXIS), mesh=mesh,
                               in_specs=P(lesson.AXIS), out_specs=P(lesson.AXIS),
                               check_vma=False)
    with jax.set_mesh(mesh):
        return measure(everywhere, x, structure=None)


def test_a_ring_shift_moves_one_shard_per_chip(simulated_chips):
    x = np.random.default_rng(0).standard_normal((4 * 8, 128)).astype(np.float32)
    ran = on_ring(chapter().ring_shift, 4, x)
    np.testing.assert_array_equal(ran.output, np.roll(x, 8, axis=0))
    assert ran.remote_bytes == x.nbytes
    lesson.check_remote_bytes(ran, x.nbytes, what="one shard per chip")
    lesson.check_copies_leave(ran)
    lesson.check_on_every_device(ran, 4)


@pytest.mark.parametrize("wrong, expected", [(None, ""), ("n_steps", "n_steps")])
def test_an_all_gather_moves_n_minus_1_shards_per_chip(simulated_chips, wrong, expected):
    n, rows = 4, 8
    x = np.random.default_rng(1).standard_normal((n * rows, 128)).astype(np.float32)
    ran = on_ring(chapter(wrong).all_gather, n, x)
    shard = x.nbytes // n
    assert kind(lesson.check_remote_bytes, ran, n * (n - 1) * shard, what="the ring",
                likely={"n_steps": n * n * shard}) == expected
