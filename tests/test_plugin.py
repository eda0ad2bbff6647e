"""The plugin end to end, in a copy of the kit (pytester): options, hints,
scoreboard, progress file, hardware gating, races, hangs, broken chapters."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_pallas_hints import catalogue, compile_cache

from .conftest import TOY_HINTS, TOY_TEST

KIT = catalogue.load(Path(__file__).resolve().parent.parent)

def headline(out: str) -> list[str]:
    return re.findall(r"^Pallas exercises.*points$", out, re.M)


def scoreboard(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Pallas exercises"))
    end = next(i for i in range(start, len(lines))
               if lines[i].startswith(("next:", "every puzzle solved")))
    return lines[start:end + 1]


# ----------------------------------------------------------------- options ---

@pytest.mark.parametrize("value", ["0", "4", "9", "x", "-1"])
def test_bad_hint_level_is_a_usage_error_naming_the_valid_values(kit, value):
    result = kit.run("exercises/test_basics.py", f"--hint={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "give a level from 1 to 3" in result.stderr.str()


def test_options_are_documented_in_help(kit):
    out = kit.run("--help").stdout.str()
    for option in ("--hint=N", "--reference", "--no-scoreboard", "--pallas-timeout"):
        assert option in out


def test_bare_hint_before_a_path_does_not_swallow_it(kit):
    kit.add_toy_chapter(solved=False)
    result = kit.run("--hint", "exercises/test_toy.py")
    assert "hint 1 of 3 · the idea" in result.stdout.str()
    result.assert_outcomes(failed=2)


# ------------------------------------------------------------------- hints ---

def test_bare_hint_escalates_one_level_per_failing_run_and_ends_at_the_solution(kit):
    outs = [kit.run("exercises/test_basics.py", "-k", "add_one", "--hint").stdout.str()
            for _ in range(4)]
    assert "hint 1 of 3 · the idea" in outs[0] and "hint 2 of 3" not in outs[0]
    assert "hint 2 of 3 · a skeleton" in outs[1] and "hint 1 of 3" not in outs[1]
    for out in outs[2:]:
        assert "hint 3 of 3 · the solution" in out
        assert "def add_one_kernel(x_ref, o_ref):" in out
        assert "o_ref[...] = x_ref[...] + 1" in out


def test_hint_n_shows_levels_one_to_n(kit):
    out = kit.run("exercises/test_basics.py", "-k", "tiled", "--hint=2").stdout.str()
    assert out.index("hint 1 of 3") < out.index("hint 2 of 3")
    assert "hint 3 of 3" not in out


def test_passing_puzzles_print_no_hint(kit):
    kit.add_toy_chapter(solved=True)
    out = kit.run("exercises/test_toy.py", "--hint=3").stdout.str()
    assert "hint 1 of 3" not in out and "passed" in out


def test_without_reference_level_three_says_it_is_not_shipped(kit):
    import shutil

    shutil.rmtree(kit.path / "reference")
    out = kit.run("exercises/test_basics.py", "-k", "add_one", "--hint=3").stdout.str()
    assert "not shipped with this copy" in out


def test_without_reference_the_reference_option_is_a_usage_error(kit):
    import shutil

    shutil.rmtree(kit.path / "reference")
    result = kit.run("exercises/test_basics.py", "--reference")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "no reference/" in result.stderr.str()


def test_hint_and_reference_work_from_the_exercises_folder(kit):
    kit.add_toy_chapter(solved=False)
    kit.pytester.chdir()
    import os

    os.chdir(kit.path / "exercises")
    hinted = kit.pytester.runpytest_inprocess("test_toy.py", "--hint", "-p", "no:cacheprovider")
    assert "hint 1 of 3" in hinted.stdout.str()
    assert "next: pytest test_toy.py -k answer" in hinted.stdout.str()
    solved = kit.pytester.runpytest_inprocess("test_toy.py", "--reference",
                                              "-p", "no:cacheprovider")
    solved.assert_outcomes(passed=2)


def test_hint_and_reference_work_under_xdist_from_the_exercises_folder(kit):
    kit.add_toy_chapter(solved=False)

    def pytest_in_exercises(*args):
        return subprocess.run([sys.executable, "-m", "pytest", *args, "-n", "2",
                               "-p", "no:cacheprovider"], cwd=kit.path / "exercises",
                              capture_output=True, text=True, timeout=300).stdout

    assert "hint 1 of 3 · the idea" in pytest_in_exercises("test_toy.py", "--hint")
    assert "2 passed" in pytest_in_exercises("test_toy.py", "--reference")


# ------------------------------------------------------------ the failure ---

def test_stubs_fail_in_one_line_each_without_traceback(kit):
    result = kit.run("exercises/test_basics.py", "-k", "add_one or tiled")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert re.search(r"^· basics.add_one +not started — edit exercises/basics.py:\d+ add_one\(\), "
                     r":\d+ add_one_kernel\(\)$", out, re.M)
    assert "Traceback" not in out and "FAILURES" not in out and "FAILED" not in out


def test_a_stub_named_like_another_chapters_function_is_this_chapters(kit):
    """Two chapters may both have an add_one(): a stub belongs to its own file's puzzle."""
    kit.add_toy_chapter(solved=False)
    kit.write("exercises/hints/toy.toml", TOY_HINTS.replace('"answer"]', '"add_one"]')
              .replace("order = 0", "order = 9"))  # after basics, which has an add_one too
    kit.write("exercises/toy.py", 'def add_one():\n    """One more."""\n'
                                  '    raise NotImplementedError\n')
    kit.write("exercises/test_toy.py", TOY_TEST.replace("toy.answer()", "toy.add_one()"))
    out = kit.run("exercises/test_toy.py").stdout.str()
    assert re.search(r"^· toy.answer +not started — edit exercises/toy.py:3 add_one\(\)$",
                     out, re.M), out


def test_verbose_still_shows_the_raw_traceback(kit):
    out = kit.run("exercises/test_basics.py", "-k", "add_one", "-v").stdout.str()
    assert "raise NotImplementedError" in out and "FAILURES" in out
    assert "not started" in out


def test_a_wrong_answer_names_the_puzzle_config_and_seed(kit):
    kit.add_toy_chapter(solved=True)
    kit.write("exercises/toy.py", 'def answer():\n    """x"""\n    return 41.0\n')
    out = kit.run("exercises/test_toy.py").stdout.str()
    assert re.search(r"^✗ toy.answer  \[1, float64\]$", out, re.M)
    assert "diagnosis  not the answer." in out
    assert "also       fails on [2]" in out
    assert "more       pytest exercises/test_toy.py -k answer --hint   (hint 1 of 3)" in out


def test_what_the_learner_printed_is_shown_with_the_diagnosis(kit):
    kit.add_toy_chapter(solved=True)
    kit.write("exercises/toy.py", 'def answer():\n    """x"""\n    print("debug: 41")\n'
                                  '    return 41.0\n')
    out = kit.run("exercises/test_toy.py").stdout.str()
    assert "  printed    debug: 41" in out


def test_syntax_error_in_one_chapter_fails_its_tests_and_grades_the_rest(kit):
    kit.add_toy_chapter(solved=True)
    kit.write("exercises/basics.py", "def add_one(x:\n    pass\n")
    result = kit.run("exercises/test_basics.py", "exercises/test_toy.py")
    out = result.stdout.str()
    assert "exercises/basics.py:1 does not import: SyntaxError" in out
    assert re.search(r"^  toy +█+ +1/1", out, re.M)
    assert "error" not in result.parseoutcomes()


# ------------------------------------------------------------ scoreboard ---

def test_scoreboard_covers_the_whole_kit_and_remembers_other_chapters(kit):
    kit.add_toy_chapter(solved=True)
    kit.run("exercises/test_toy.py")
    out = kit.run("exercises/test_basics.py", "-k", "add_one").stdout.str()
    board = scoreboard(out)
    puzzles = sum(len(c.puzzles) for c in KIT.values()) + 1
    points = sum(c.points for c in KIT.values()) + 5
    assert headline(out) == [f"Pallas exercises · 1 of {puzzles} puzzles · 5 / {points} points"]
    assert re.match(r"  toy +█{10} +1/1 +5/5 pts +last run \d{4}-\d\d-\d\d$", board[1])
    assert re.match(r"  basics +░{10} +0/9 +0/90 pts +next: basics.add_one$", board[2])
    for name in KIT:
        assert any(line.startswith(f"  {name} ") for line in board)
    assert board[-1] == "next: pytest exercises/test_basics.py -k add_one"


def test_scoreboard_is_printed_once_and_the_same_under_xdist(kit):
    kit.add_toy_chapter(solved=True)
    serial = kit.run("exercises/test_toy.py", "exercises/test_basics.py", "-k", "answer or tiled",
                     subprocess=True).stdout.str()
    (kit.path / ".pallas_progress.json").unlink()
    parallel = kit.run("exercises/test_toy.py", "exercises/test_basics.py", "-k",
                       "answer or tiled", "-n", "2", subprocess=True).stdout.str()
    assert len(headline(parallel)) == 1
    assert scoreboard(parallel) == scoreboard(serial)
    assert "basics.tiled  not started" in parallel


def test_no_scoreboard(kit):
    kit.add_toy_chapter(solved=True)
    assert headline(kit.run("exercises/test_toy.py", "--no-scoreboard").stdout.str()) == []


def test_a_puzzle_is_solved_only_when_all_its_tests_ran_and_passed(kit):
    kit.add_toy_chapter(solved=True)
    out = kit.run("exercises/test_toy.py", "-k", "1").stdout.str()
    assert re.search(r"toy +░+ +0/1", out)
    out = kit.run("exercises/test_toy.py").stdout.str()
    assert re.search(r"toy +█+ +1/1", out)


def test_reference_runs_do_not_touch_the_progress_file(kit):
    kit.add_toy_chapter(solved=False)
    kit.run("exercises/test_toy.py", "--reference")
    assert not (kit.path / ".pallas_progress.json").exists()


def test_progress_file_is_versioned_json(kit):
    kit.add_toy_chapter(solved=True)
    kit.run("exercises/test_toy.py")
    data = json.loads((kit.path / ".pallas_progress.json").read_text())
    assert data["version"] == 1
    assert data["puzzles"]["toy.answer"]["status"] == "solved"
    assert list(kit.path.glob(".pallas_progress.json.*")) == []  # no temp file left


@pytest.mark.parametrize("content", ["{not json", '{"version": 99, "puzzles": {}}', "[]"])
def test_a_corrupt_progress_file_is_set_aside_with_a_warning(kit, content):
    kit.add_toy_chapter(solved=True)
    (kit.path / ".pallas_progress.json").write_text(content)
    result = kit.run("exercises/test_toy.py")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK
    assert "could not be read" in out and "moved aside" in out
    assert [p.read_text() for p in kit.path.glob(".pallas_progress.json.bad-*")] == [content]
    assert json.loads((kit.path / ".pallas_progress.json").read_text())["version"] == 1


def test_outside_a_kit_the_plugin_stays_quiet(pytester):
    pytester.makepyfile("def test_x():\n    assert True\n")
    out = pytester.runpytest_inprocess("-p", "no:cacheprovider").stdout.str()
    assert "Pallas" not in out


# -------------------------------------------------------------- hardware ---

HARDWARE_TESTS = '''
import pytest

@pytest.mark.tpu
def test_needs_tpu():
    pass

@pytest.mark.gpu
def test_needs_gpu():
    pass
'''


def test_tpu_and_gpu_tests_are_skipped_naming_the_missing_hardware(kit, monkeypatch):
    kit.write("exercises/test_hw.py", HARDWARE_TESTS)
    monkeypatch.setenv("PALLAS_HINTS_PLATFORMS", "cpu")   # whatever this host has
    result = kit.run("exercises/test_hw.py", "-rs")
    result.assert_outcomes(skipped=2)
    out = result.stdout.str()
    assert "needs a TPU: none detected here" in out and "needs a GPU: none detected" in out


@pytest.mark.parametrize("present, passed, skipped", [("tpu", 1, 1), ("gpu", 1, 1),
                                                       ("tpu,gpu", 2, 0)])
def test_tpu_and_gpu_tests_run_where_the_hardware_is(kit, monkeypatch, present, passed, skipped):
    kit.write("exercises/test_hw.py", HARDWARE_TESTS)
    monkeypatch.setenv("PALLAS_HINTS_PLATFORMS", present)
    kit.run("exercises/test_hw.py").assert_outcomes(passed=passed, skipped=skipped)


def test_tpu_marked_puzzle_tests_never_count_as_passed(kit):
    out = kit.run("exercises/test_basics.py", "--reference", "-m", "tpu", "-rs").stdout.str()
    assert "9 checks need a TPU (skipped here, never counted as passed)" in out
    assert re.search(r"^  basics +░+ +0/9 ", out, re.M)


# ------------------------------------------------------ races and hangs ---

RACY = '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

def racy_kernel(x_hbm, o_ref, buf, sem):
    copy = pltpu.make_async_copy(x_hbm, buf, sem)
    copy.start()
    o_ref[...] = buf[...] * 2    # reads the buffer while the DMA is in flight
    copy.wait()

def waiting_kernel(x_hbm, o_ref, buf, sem):
    pltpu.make_async_copy(x_hbm, buf, sem).wait()   # no start(): waits forever
    o_ref[...] = buf[...]

def call(kernel, x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA])(x)

def test_race():
    call(racy_kernel, jnp.ones((8, 128))).block_until_ready()

def test_hang():
    call(waiting_kernel, jnp.ones((8, 128))).block_until_ready()

def test_after_the_hang():
    assert True
'''


def test_a_dma_race_fails_naming_both_lines_and_a_hang_fails_within_the_bound(kit):
    kit.write("exercises/test_dma.py", RACY)
    result = kit.run("exercises/test_dma.py", "--pallas-timeout=3")
    result.assert_outcomes(failed=2, passed=1)
    out = result.stdout.str()
    assert "race detected" in out
    assert "test_dma.py:8" in out and "test_dma.py:9" in out
    assert "KernelTimeout: no result after 3 s" in out


def test_a_race_in_a_puzzle_test_is_diagnosed(kit):
    kit.write("exercises/test_dma.py", RACY.replace(
        "def test_race():", "import pytest\n@pytest.mark.puzzle('basics.add_one')\ndef test_race():"))
    out = kit.run("exercises/test_dma.py", "-k", "race", "-n", "2", subprocess=True).stdout.str()
    assert "✗ basics.add_one" in out
    assert "race       test_dma.py:8 in racy_kernel()" in out
    assert "test_dma.py:9 in racy_kernel()" in out
    assert "not ordered" in out


def test_an_unknown_puzzle_id_is_a_usage_error(kit):
    kit.write("exercises/test_bad.py",
              "import pytest\n@pytest.mark.puzzle('basics.nope')\ndef test_x():\n    pass\n")
    result = kit.run("exercises/test_bad.py")
    assert result.ret != pytest.ExitCode.OK
    assert "basics.nope" in result.stdout.str() + result.stderr.str()


def test_compiled_programs_are_kept_in_pytests_cache_folder_unless_it_is_off(kit):
    folder = kit.path / ".pytest_cache" / "d" / "pallas-xla"
    kit.run("exercises/test_basics.py", "--reference", "-k", "add_one")
    assert not folder.exists()  # -p no:cacheprovider, as the grading workflow runs
    first = kit.run("exercises/test_basics.py", "--reference", "-k", "add_one", cache=True)
    if not compile_cache._state["load_callbacks"]:
        pytest.skip("this jaxlib takes Python callbacks only as capsules: none are kept")
    entries = sorted(folder.glob("*.xla"))
    second = kit.run("exercises/test_basics.py", "--reference", "-k", "add_one", cache=True)
    first.assert_outcomes(passed=2, skipped=1)
    second.assert_outcomes(passed=2, skipped=1)
    assert entries and sorted(folder.glob("*.xla")) == entries  # loaded, none added


# ------------------------------------------------- JAX versions, kit errors ---

def test_a_jax_outside_the_supported_range_is_a_usage_error(kit, monkeypatch):
    from pytest_pallas_hints import jaxcompat

    monkeypatch.setattr(jaxcompat, "installed", lambda package="jax": "0.7.2")
    result = kit.run("exercises/test_basics.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "JAX 0.7.2 is older than this kit supports (JAX 0.8.0 or newer)" in \
        result.stderr.str()
    monkeypatch.setattr(jaxcompat, "installed", lambda package="jax": None)
    assert "run `pip install -e .`" in kit.run("exercises/test_basics.py").stderr.str()


def test_a_check_this_jax_cannot_support_is_unverifiable_and_the_rest_runs(kit, monkeypatch):
    monkeypatch.setenv("PALLAS_HINTS_MISSING", "byte accounting")
    result = kit.run("exercises/test_basics.py", "--reference", "-k", "bias_gelu", "-rs")
    out = result.stdout.str()
    result.assert_outcomes(passed=2, skipped=2)   # one needs a TPU, one needs bytes
    assert "cannot be verified on JAX" in out and "byte accounting is not available" in out
    assert re.search(r"^  jax +1 check cannot be verified on JAX [\d.]+ \(byte accounting\): "
                     r"never counted as passed$", out, re.M)
    assert re.search(r"^  basics +░+ +0/9 ", out, re.M)


def test_a_failure_of_the_kit_itself_is_reported_as_such_and_changes_no_progress(
        kit, monkeypatch):
    from pytest_pallas_hints import walk

    kit.write("exercises/basics.py", (kit.path / "reference" / "basics.py").read_text())
    kit.run("exercises/test_basics.py", "-k", "bias_gelu")
    before = json.loads((kit.path / ".pallas_progress.json").read_text())
    assert before["puzzles"]["basics.bias_gelu"]["status"] == "solved"

    def broken(*args):
        raise RuntimeError("walk broke")

    monkeypatch.setattr(walk, "kernel_counts", broken)
    result = kit.run("exercises/test_basics.py", "-k", "bias_gelu")
    out = result.stdout.str()
    assert result.parseoutcomes().get("errors") == 3   # every test of it that runs here
    assert "failed" not in result.parseoutcomes()
    assert "! basics.bias_gelu  kit problem" in out
    assert "this is a problem in the exercise kit, not in your code" in out
    assert "RuntimeError: walk broke" in out and "(checks before the run)" in out
    assert "hit a problem in the kit itself" in out
    after = json.loads((kit.path / ".pallas_progress.json").read_text())
    assert after["puzzles"]["basics.bias_gelu"] == before["puzzles"]["basics.bias_gelu"]


# ------------------------------------------------------------------ seeds ---

SEEDED = '''
import numpy as np
import pytest
from pytest_pallas_hints import check

@pytest.mark.puzzle("toy.answer")
def test_answer(rng):
    x = rng.normal((4,))
    print("drawn", x[0])
    check(x * 0, x)


@pytest.mark.puzzle("toy.answer")
def test_answer_again():
    pass
'''


def test_inputs_are_fresh_each_session_and_a_failure_prints_its_replay(kit):
    kit.add_toy_chapter(solved=True)
    kit.write("exercises/test_toy.py", SEEDED)

    def drawn(*args):
        out = kit.run("exercises/test_toy.py", "-n", "2", *args, subprocess=True).stdout.str()
        seeds = re.findall(r"seed (\d+)\]", out)
        replay = re.findall(r"replay +(pytest .*)$", out, re.M)
        return out, seeds, replay, sorted(re.findall(r"drawn (\S+)", out))

    first, seeds, replay, values = drawn()
    assert seeds and replay == [f"pytest exercises/test_toy.py --seed {seeds[0]} -k test_answer"]
    second = drawn()
    assert second[3] != values, "two sessions drew the same inputs"
    again = drawn("--seed", seeds[0], "-k", "test_answer")
    assert again[1][0] == seeds[0] and again[3] == values


def test_a_bad_seed_is_a_usage_error(kit):
    result = kit.run("exercises/test_basics.py", "--seed", "abc")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--seed=abc: give a whole number" in result.stderr.str()


def test_hint_on_a_solved_puzzle_says_so_and_names_the_next_one(kit):
    kit.add_toy_chapter(solved=True)
    out = kit.run("exercises/test_toy.py", "--hint").stdout.str()
    assert "✓ toy.answer: solved, so no hint needed. Next: pytest exercises/test_basics.py " \
           "-k add_one" in out
    assert "hint 1 of" not in out


def test_points_are_announced_once_even_when_a_puzzle_is_solved_again(kit):
    kit.add_toy_chapter(solved=True)
    assert "✓ toy.answer  solved · +5 points" in kit.run("exercises/test_toy.py").stdout.str()
    assert "✓ toy.answer  solved" not in kit.run("exercises/test_toy.py").stdout.str()
    kit.add_toy_chapter(solved=False)
    kit.run("exercises/test_toy.py")
    kit.add_toy_chapter(solved=True)
    out = kit.run("exercises/test_toy.py").stdout.str()
    assert "✓ toy.answer  solved again" in out and "+5 points" not in out


DEVICES = '''
import jax
import jax.numpy as jnp
import pytest

@pytest.mark.puzzle("basics.add_one")
def test_on_the_cpu():
    assert {d.platform for d in jnp.zeros(1).devices()} == {"cpu"}
    assert jax.config.jax_default_device.platform == "cpu"
'''


def test_on_a_gpu_host_every_verdict_runs_on_the_cpu(kit, monkeypatch):
    """Where JAX's default device is a GPU, the plugin pins tests to the CPU, so that
    verdicts are those of a laptop (no TF32 matmuls in expected values)."""
    monkeypatch.setenv("PALLAS_HINTS_PLATFORMS", "gpu,cpu")
    kit.write("exercises/test_devices.py", DEVICES)
    kit.run("exercises/test_devices.py").assert_outcomes(passed=1)


# ------------------------------------------------------------- the cost line ---

def test_a_solved_performance_puzzle_shows_its_tpu_cost_and_cost_prints_the_table(kit):
    kit.write("exercises/flash.py", (kit.path / "reference" / "flash.py").read_text())
    out = kit.run("exercises/test_flash.py", "-k", "causal or dense", "--cost").stdout.str()
    solved = out.split("✓ flash.causal  solved · +")[1].splitlines()
    # projected to the test's tpu configuration: 65,536 steps of blocks of 128
    assert re.match(r"  at B=4 N=16 T=S=4096-tpu, on TPU v5e: >= [\d.]+ [nµm]?s "
                    r"\((memory|compute|vector|overhead)-bound, [\d.]+ flop/B\), "
                    r"VMEM [\d.]+ KiB of 16 MiB · on TPU v6e: >= ", solved[1]), solved[1]
    dense_line = out.split("✓ flash.dense  solved")[1].splitlines()[1]
    assert not dense_line.startswith("  on TPU")    # plain JAX, not a performance lesson
    table = out.split("cost on a TPU")[1].split("progress")[0]
    assert "flash.causal [" in table and "on the MXU" in table and "flop/B" in table
    assert "flash.causal [B=4 N=16 T=S=4096-tpu] · yours, projected to this TPU size" in table
    assert "flash.causal [B=4 N=16 T=S=4096-tpu] · the reference, projected" in table
    assert "bytes per operand: q_ref 128 MiB (1x) · k_ref 2.06 GiB (16.5x)" in table
    assert "Sources: pytest_pallas_hints/cost.py" in table


def test_a_primitive_with_no_tpu_lowering_is_named_not_called_not_started(kit):
    solved = (kit.path / "reference" / "basics.py").read_text()
    kit.write("exercises/basics.py", solved.replace(
        "o_ref[...] = x_ref[...] + 1",
        "o_ref[...] = x_ref[...] + 1 + 0 * jnp.cumsum(x_ref[...], axis=0)"))
    out = kit.run("exercises/test_basics.py", "-k", "add_one").stdout.str()
    assert "not started" not in out.split("progress")[0]
    assert "`cumsum` has no lowering inside a TPU kernel" in out


def test_a_not_implemented_error_outside_a_stub_is_an_error_with_its_line():
    from pytest_pallas_hints import diagnose

    frames = [("/kit/exercises/basics.py", 12, "return helper(x)")]
    finding = diagnose.explain(NotImplementedError("the case T > 1 is missing"), frames,
                               Path("/kit"))
    assert finding.kind != "not_started" and "T > 1 is missing" in str(finding.to_dict())
    stub = [("/kit/exercises/basics.py", 12, "raise NotImplementedError")]
    assert diagnose.explain(NotImplementedError(), stub, Path("/kit")).kind == "not_started"
