"""The diagnosis engine on its own: arrays and exceptions in, findings out (no pytest run)."""
from pathlib import Path

import numpy as np
import pytest

from pytest_pallas_hints import diagnose
from pytest_pallas_hints.diagnose import compare, explain, render

ROOT = Path("/kit")


def kinds(findings):
    return [f.kind for f in findings]


def text(findings, words=None):
    return "\n".join(render(findings, words))


@pytest.fixture
def x():
    return np.random.default_rng(0).standard_normal((32, 256)).astype(np.float32)


def test_equal_arrays_have_no_findings(x):
    assert compare(x, x.copy()) == []


def test_shape_mismatch_names_both_shapes(x):
    findings = compare(x[:16], x)
    assert kinds(findings) == ["shape"]
    assert "expected (32, 256) float32 · yours (16, 256) float32" in text(findings)


def test_swapped_shape_looks_transposed(x):
    assert kinds(compare(x.T, x)) == ["transposed"]


def test_square_last_dims_with_another_leading_dim_are_a_shape_not_a_transpose():
    a = np.zeros((3, 8, 8), np.float32)
    findings = compare(a, np.zeros((5, 8, 8), np.float32))
    assert kinds(findings) == ["shape"]


def test_transposed_values_of_a_square_output():
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    assert "transposed" in kinds(compare(a.T.copy(), a))


def test_dtype_only(x):
    findings = compare(x.astype(np.float16), x, tolerance=1e-2)
    assert kinds(findings) == ["dtype"]
    assert ".astype(o_ref.dtype)" in text(findings)


def test_nan_counts_and_explains_uninitialised_memory(x):
    y = x.copy()
    y[3, :10] = np.nan
    findings = compare(y, x)
    assert kinds(findings)[0] == "nan"
    out = text(findings)
    assert "10 of 8192 values are NaN" in out
    assert "uninitialised" in out


def test_nan_in_the_tail_block_says_mask(x):
    expected = x[:20]
    y = expected.copy()
    y[16:] = np.nan  # the last, partial block of 8 rows
    findings = compare(y, expected, blocks=(8, None))
    assert kinds(findings)[0] == "nan"
    assert "hangs off the end" in text(findings)


def test_whole_blocks_of_nan_are_unwritten(x):
    y = x.copy()
    y[:, 128:] = np.nan
    findings = compare(y, x, blocks=(8, 128), axes="i j")
    assert kinds(findings)[0] == "unwritten"
    out = text(findings)
    assert "never written" in out
    assert "i\\j" in out and "✗" in out and "✓" in out
    assert "index maps" in out


def test_unwritten_blocks_of_a_kernel_without_a_grid_say_nothing_of_grids(x):
    """A kernel with no grid (a pl.kernel, a pallas_call of one step that loops itself)
    writes every block with its own stores: no grid or index map to blame."""
    y = x.copy()
    y[:, 128:] = np.nan
    findings = compare(y, x, blocks=(8, 128), axes="i j", gridless=True)
    assert kinds(findings)[0] == "unwritten"
    assert "no grid" in findings[0].says and "index map" not in findings[0].says


def test_all_zeros(x):
    assert kinds(compare(np.zeros_like(x), x))[0] == "zeros"


@pytest.mark.parametrize("factor, name", [
    (0.125, "0.125 = 1/8 = 1/sqrt(64)"),
    (2.0, "2"),
    (1 / np.sqrt(128), "0.08839 = 1/sqrt(128)"),
    (-1.0, "-1"),
])
def test_constant_factor_is_named(x, factor, name):
    findings = compare((x * factor).astype(np.float32), x)
    assert kinds(findings)[0] == "scaled"
    assert f"yours = {name} × expected" in findings[0].says


@pytest.mark.parametrize("factor, narrow, scale", [
    (2.0, True, True), (0.125, True, True), (0.97, True, False), (0.97, False, False)])
def test_a_factor_no_scale_explains_is_not_called_a_scale(x, factor, narrow, scale):
    """0.97 x expected is no scale applied twice: the words say so and ask what could
    make it (rounding, only where the program holds a narrow float)."""
    findings = compare((x * factor).astype(np.float32), x, narrow=narrow)
    says = findings[0].says
    assert kinds(findings)[0] == "scaled"
    assert ("A scale applied twice" in says) == scale
    assert ("rounded to a narrow float" in says) == (narrow and not scale)


def test_a_constant_offset_is_named(x):
    findings = compare(x + 1, x)
    assert kinds(findings)[0] == "offset"
    assert ("offset", "yours = expected + 1") in findings[0].facts


def test_block_map_marks_only_the_wrong_blocks(x):
    y = x.copy()
    y[8:16, 128:] += 1  # block (1, 1) of a 4 x 2 grid
    findings = compare(y, x, blocks=(8, 128), axes="i j")
    assert "blocks" in kinds(findings)
    rows = dict(findings[0].facts)["blocks"].splitlines()
    assert rows[0].split() == ["i\\j", "0", "1"]
    assert rows[1].split() == ["0", "✓", "✓"]
    assert rows[2].split() == ["1", "✓", "✗"]
    assert "in 1 of 8 output blocks" in text(findings)


def test_wrong_only_in_the_partial_tail_block(x):
    expected = x[:20]
    y = expected.copy()
    y[17] += 3
    assert "tail" in kinds(compare(y, expected, blocks=(8, None)))


def test_a_full_last_block_is_not_called_a_tail(x):
    y = x.copy()
    y[24:] += 3  # 32 rows in blocks of 8: the last block is whole
    assert "tail" not in kinds(compare(y, x, blocks=(8, None)))


@pytest.mark.parametrize("shift, side", [(1, "above"), (-1, "below"), (0, "on")])
def test_wrong_values_on_one_side_of_the_diagonal(shift, side):
    expected = np.ones((16, 16), np.float32)
    y = expected + np.eye(16, k=shift, dtype=np.float32)
    findings = compare(y, expected)
    assert f"{side}_diagonal" in kinds(findings)


def test_a_wrong_block_far_from_the_diagonal_is_not_called_above_it():
    expected = np.ones((8, 256), np.float32)
    y = expected.copy()
    y[:, 128:] += 1
    assert "above_diagonal" not in kinds(compare(y, expected, blocks=(8, 128)))


def test_known_wrong_answer_comes_first_and_takes_the_puzzle_words(x):
    findings = compare(x[::-1].copy(), x, likely={"rows_reversed": x[::-1]})
    assert kinds(findings)[0] == "rows_reversed"
    out = text(findings, {"rows_reversed": "rows inside a block keep their order"})
    assert "diagnosis  rows inside a block keep their order" in out


def test_two_known_wrong_answers_this_input_cannot_separate_are_both_offered(x):
    """The kit has shown only that the output is what either mistake gives: naming one
    of them as the cause would be a guess (splash.compact, padding 0 or repeated, on a
    table whose only padding row starts it)."""
    wrong = x[::-1].copy()
    findings = compare(wrong, x, likely={"zero": wrong, "repeat": wrong, "other": x * 2})
    assert kinds(findings)[0] == "zero" and findings[0].alike == ["repeat"]
    out = text(findings, {"zero": "padding names block 0.", "repeat": "padding repeats."})
    assert "exactly what 2 known mistakes give on this input" in out
    assert "(1) padding names block 0." in out and "(2) padding repeats." in out
    assert diagnose.Finding.from_dict(findings[0].to_dict()).alike == ["repeat"]


def test_words_keyed_by_what_was_shown_come_before_words_keyed_by_the_symptom():
    """NaN in a block that hangs off the array is shown (detail "tail"): a puzzle's
    "nan:out:tail" words may name the mask; its "nan:out" words serve every other NaN."""
    expected = np.ones((20, 4), np.float32)
    tail = expected.copy()
    tail[16:] = np.nan
    words = {"nan:out:tail": "mask rows past R.", "nan:out": "was a scratch read first?"}
    findings = compare(tail, expected, blocks=(8, 4), name="out")
    assert findings[0].detail == "tail"
    assert "mask rows past R." in "\n".join(render(findings, words, "out"))
    inside = expected.copy()
    inside[:8] = np.nan
    out = "\n".join(render(compare(inside, expected, blocks=(8, 4), name="out"), words, "out"))
    assert "was a scratch read first?" in out and "mask rows" not in out


def test_a_known_wrong_answer_with_nan_matches_nan_at_the_same_places(x):
    wrong = x.copy()
    wrong[:4] = np.nan   # rows where the wrong kernel divides 0 by 0
    assert kinds(compare(wrong, x, likely={"reset": wrong.copy()}))[0] == "reset"
    elsewhere = x.copy()
    elsewhere[4:8] = np.nan
    assert "reset" not in kinds(compare(elsewhere, x, likely={"reset": wrong}))


def test_puzzle_words_for_a_general_finding_replace_the_engine_sentence(x):
    findings = compare(np.zeros_like(x), x)
    assert "store it!" in text(findings, {"zeros": "store it!"})
    assert "store it!" not in text(findings, {"nan": "store it!"})


def test_an_accumulator_carried_from_block_to_block_is_named():
    expected = np.arange(32, dtype=np.float32).reshape(4, 8) + 1
    yours = np.cumsum(expected, axis=0)  # each block starts from the previous one's end
    findings = compare(yours.reshape(32), expected.reshape(32), blocks=(8,), axes="i")
    assert kinds(findings)[0] == "carried"
    assert "not reset" in findings[0].says


def test_a_carried_accumulator_is_named_when_the_last_block_is_partial():
    expected = np.arange(17, dtype=np.float32) + 1  # blocks of 8: 8, 8 and 1 row
    yours = expected.copy()
    yours[8:16] += yours[0:8]
    yours[16] += yours[8]  # the partial block's one row starts from the previous block's
    assert kinds(compare(yours, expected, blocks=(8,), axes="i"))[0] == "carried"
    yours[16] = expected[16] + 5  # not what was carried: no claim
    assert "carried" not in kinds(compare(yours, expected, blocks=(8,), axes="i"))


def test_a_map_of_one_tiled_dim_is_one_line(x):
    y = x.copy()
    y[8:16] += 1
    rows = dict(compare(y, x, blocks=(8, None), axes="i -")[0].facts)["blocks"].splitlines()
    assert [r.split() for r in rows] == [["i", "0", "1", "2", "3"], ["✓", "✗", "✓", "✓"]]


def test_a_single_partial_block_is_not_called_the_tail():
    expected = np.ones((5, 128), np.float32)
    assert "tail" not in kinds(compare(expected + 1, expected, blocks=(8, None)))


def test_words_for_one_output_come_before_words_for_the_kind(x):
    findings = compare(x * 2, x)
    words = {"scaled": "general", "scaled:dq": "about dq"}
    assert "about dq" in "\n".join(render(findings, words, "dq"))
    assert "general" in "\n".join(render(findings, words, "dv"))


def test_findings_survive_a_round_trip_through_json(x):
    import json

    findings = compare(x * 2, x, blocks=(8, None))
    back = [diagnose.Finding.from_dict(d) for d in json.loads(
        json.dumps([f.to_dict() for f in findings]))]
    assert text(back) == text(findings)


# ---------------------------------------------------------------- errors ---

def frames_in(path="/kit/exercises/basics.py", line=12, code="o_ref[...] = x"):
    return [("/kit/exercises/test_basics.py", 30, "check(run(...))"), (path, line, code)]


def test_not_started_points_at_the_learner_file():
    finding = explain(NotImplementedError(), frames_in(line=60, code="raise NotImplementedError"),
                      ROOT)
    assert finding.kind == "not_started"
    assert finding.where == "exercises/basics.py:60"
    assert finding.facts == []


def test_traced_if_from_a_real_tracer():
    import jax
    import jax.numpy as jnp

    def f(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(Exception) as info:
        jax.jit(f)(jnp.float32(1))
    finding = explain(info.value, frames_in(code="if x > 0:"), ROOT)
    assert finding.kind == "traced_if"
    assert "pl.when" in finding.says and "jnp.where" in finding.says
    assert ("at", "exercises/basics.py:12   if x > 0:") in finding.facts


def test_python_min_in_an_index_map_is_not_called_a_kernel_if():
    class TracerBoolConversionError(TypeError):
        pass

    error = TracerBoolConversionError(
        "Attempted boolean conversion of traced array with shape bool[].\nThe error "
        "occurred while tracing the function kv_index_map at k.py:6 for pallas_call index_map.")
    finding = explain(error, [], ROOT)
    assert finding.kind == "traced_index_map" and "jnp.minimum" in finding.says


@pytest.mark.parametrize("message, kind, words", [
    ("Index map function <lambda> at k.py:3 for args[0] must return 2 values to match "
     "block_shape=(Blocked(block_size=8), Blocked(block_size=128)). Currently returning 1 "
     "values:", "index_map_arity", "must return 2 block indices, one per dim of its block, but returns 1"),
    ("Invalid shape for `swap`. Ref shape: (8, 128). Expected shape: (8, 128). "
     "Value shape: (128,). Transforms: ().", "store_shape",
     "a value of shape (128,) into a ref of shape (8, 128)"),
    ("Invalid dtype for `swap`. Ref dtype: bfloat16. Value dtype: float32.", "store_dtype",
     "a float32 value into a bfloat16 ref"),
    ('INTERNAL: CpuCallback error calling callback: Traceback\nIndexError: Out-of-bounds '
     'block index (2, 0) for input "x_ref" in iteration (1,) on device 0 (core 0)',
     "out_of_bounds", "the index map of x_ref asks for block (2, 0)"),
    ("RuntimeError: Revisited block (slice(0, 8, 1), slice(0, 128, 1)) of output 0 in "
     "iteration (3,). The block was previously visited in iterations (0,) through (1,) .",
     "revisited", "last in the grid, and mark it \"arbitrary\""),
    ("ValueError: Dimensions with parallel semantics must form a prefix of the grid.",
     "parallel_prefix", "put the reduction axis last in the grid"),
])
def test_common_pallas_errors_in_plain_words(message, kind, words):
    finding = explain(ValueError(message), frames_in(), ROOT)
    assert finding.kind == kind
    assert words in finding.says


@pytest.mark.parametrize("semantics, says", [
    (("parallel", "parallel"), 'Grid axis 1 of gmm_kernel() is marked "parallel"'),
    (("parallel", "arbitrary"), "put the axis along which the block stays put last"),
])
def test_a_revisit_along_a_parallel_axis_names_that_axis(semantics, says):
    """The interpreter shuffles a "parallel" axis's steps: a block revisited while the
    steps moved along such an axis (here the last, so "put it last" would be no help)
    says to mark that axis "arbitrary"."""
    error = RuntimeError("Revisited block (slice(192, 256, 1), slice(0, 128, 1)) of output 0 "
                         "in iteration (0, 4). The block was previously visited in iterations "
                         "(0, 2) through (0, 2) .")
    error.pallas_kernels = [("gmm_kernel", (2, 8), semantics)]
    finding = explain(error, frames_in(), ROOT)
    assert finding.kind == "revisited" and says in finding.says
    if semantics[1] == "parallel":
        assert 'Mark axis 1 "arbitrary"' in finding.says and "last in the grid" not in finding.says


@pytest.mark.parametrize("block, step, window, says", [
    ("(2, 0)", "(0, 2)", "slice(16, 24, 1), slice(0, 128, 1)", "the grid step reversed"),
    ("(8, 0)", "(1,)", "slice(64, 72, 1), slice(0, 128, 1)", "It is an element offset"),
    ("(6, 0)", "(1,)", "slice(48, 56, 1), slice(0, 128, 1)",    # 6 is no element offset
     "The array has shape (32, 128): along dim 0 it has 4 blocks (0 to 3)"),
    ("(4, 0)", "(0,)", "slice(32, 40, 1), slice(0, 128, 1)", "or the array is smaller"),
])
def test_out_of_bounds_guesses_why_from_the_numbers(block, step, window, says):
    error = RuntimeError(f'IndexError: Out-of-bounds block index {block} for input "x_ref" '
                         f'in iteration {step} on device 0 (core 0): reading [({window})] '
                         'but input has shape (32, 128).')
    found = explain(error, [], ROOT).says
    assert says in found
    if "element offset" not in says:
        assert "element offset" not in found


def test_out_of_bounds_of_an_element_window_speaks_of_offsets():
    """A pl.Element dim's index map returns an element offset (the window starts at the
    number itself, not at number x block size): a window past the array's end is told in
    offsets and rows, never as a block index out of a count of blocks."""
    error = RuntimeError('IndexError: Out-of-bounds block index (19, 0, 0) for input "x_ref" '
                         'in iteration (1, 2) on device 0 (core 0): reading [(slice(19, 25, '
                         '1), slice(0, 9, 1), slice(0, 4, 1))] but input has shape (24, 9, 4).')
    found = explain(error, [], ROOT).says
    assert "element offsets (19, 0, 0)" in found
    assert "the window at offset 19 of 6 elements ends at 25, past the array's end" in found
    assert "block indices, from 0" not in found and "blocks (0 to" not in found


def test_a_shift_of_two_dtypes_says_to_cast_the_value():
    error = TypeError("lax.shift_right_logical requires arguments to have the same dtypes, "
                      "got int8, int32. (Tip: jnp.right_shift is a similar function that "
                      "does automatic type promotion on inputs).")
    finding = explain(error, [], ROOT)
    assert finding.kind == "shift_dtypes"
    assert "got int8 and int32" in finding.says and "v.astype(jnp.int32)" in finding.says


def test_a_store_of_another_shape_names_the_output_blockspec_among_the_causes():
    """A (16, 1) scale stored into a (16, 256) output block: the output's BlockSpec gave
    the ref its shape, so it is among the things to compare."""
    error = ValueError("Invalid shape for `swap`. Ref shape: (16, 256). Expected shape: "
                       "(16, 256). Value shape: (16, 1). Transforms: ().")
    finding = explain(error, [], ROOT)
    assert finding.kind == "store_shape"
    assert "this output's BlockSpec block shape (out_specs)" in finding.says


def test_a_kernel_that_returns_its_result_is_pointed_at():
    error = ValueError("The kernel function in the pallas_call add_one_kernel at "
                       "/kit/exercises/basics.py:35 should return None. It returns a PyTree")
    finding = explain(error, frames_in(line=60, code="return pl.pallas_call("), ROOT)
    assert finding.kind == "kernel_returns"
    assert "o_ref[...] = value, instead of returning it" in finding.says
    assert finding.where == "exercises/basics.py:35"


def test_out_of_bounds_shows_the_interpreter_message_without_wrappers():
    error = RuntimeError('INTERNAL: CpuCallback error calling callback: Traceback\n'
                         'IndexError: Out-of-bounds block index (2, 0) for input "x_ref" '
                         'in iteration (1,)')
    facts = dict(explain(error, frames_in(), ROOT).facts)
    assert facts["raised"].startswith("Out-of-bounds block index (2, 0)")


def test_an_unknown_error_inside_a_callback_shows_the_error_it_ends_with():
    """A kernel that failed inside the interpreter: its runtime error carries a Python
    traceback, and the error worth showing is its last line, not "Traceback"."""
    error = RuntimeError("INTERNAL: CpuCallback error calling callback: Traceback (most "
                         "recent call last):\n  File \"x.py\", line 3, in f\nTypeError: "
                         "int() argument must be a string, not 'NoneType'")
    finding = explain(error, frames_in(), ROOT)
    assert finding.says.startswith("TypeError: int() argument")
    assert "raised" not in dict(finding.facts)   # said once, as the diagnosis


def test_race_names_both_source_lines():
    from pytest_pallas_hints.runtime import RaceDetected

    report = ("RACE DETECTED\n  write of ('vmem', 103, 0, 0)[()] from 100, 0, "
              "/kit/exercises/p.py:25:4 (racy_kernel)\n  clock: [1 3]\n  read of "
              "('vmem', 103, 0, 0)[()] from 0, 0, /kit/exercises/p.py:26:17 (racy_kernel)")
    finding = explain(RaceDetected([report]), [], ROOT)
    assert finding.kind == "race"
    assert dict(finding.facts)["race"] == "p.py:25 in racy_kernel()\np.py:26 in racy_kernel()"


def test_a_race_inside_a_loop_body_names_the_body():
    """A fori_loop body is a nested function: the report names it kernel.<locals>.body."""
    from pytest_pallas_hints.runtime import RaceDetected

    report = ("RACE DETECTED\n  write of ('vmem', 103, 0, 0)[()] from 100, 0, "
              "/kit/exercises/p.py:9:8 (sum_kernel.<locals>.add_chunk)\n  clock: [1 3]\n"
              "  read of ('vmem', 103, 0, 0)[()] from 0, 0, "
              "/kit/exercises/p.py:10:32 (sum_kernel.<locals>.add_chunk)")
    finding = explain(RaceDetected([report]), [], ROOT)
    assert dict(finding.facts)["race"] == "p.py:9 in add_chunk()\np.py:10 in add_chunk()"


def test_hang_on_a_dma_wait():
    from pytest_pallas_hints.runtime import KernelTimeout

    error = RuntimeError(f"callback failed in dma_wait\n{KernelTimeout(5)}")
    finding = explain(error, [], ROOT)
    assert finding.kind == "hang"
    assert ".start()" in finding.says


def test_lowering_failure_names_the_rule():
    from pytest_pallas_hints.checking import LoweringFailed

    error = LoweringFailed(ValueError(
        "The Pallas TPU lowering currently requires that the last two dimensions of your "
        "block shape are divisible by 8 and 128 respectively, or be equal to the "
        "respective dimensions of the overall array. Block spec for args[0] in "
        "pallas_call k at k.py:9 has block shape (Blocked(block_size=4), "
        "Blocked(block_size=64)), array shape (32, 128), and index_map"))
    finding = explain(error, [], ROOT)
    assert finding.kind == "lowering_tiling"
    assert "multiples of (8, 128)" in finding.says
    assert "array of shape (32, 128)" in finding.says


def test_a_known_mosaic_error_is_said_in_plain_words_without_file_a_bug():
    from pytest_pallas_hints.checking import LoweringFailed

    error = LoweringFailed(ValueError(
        "Pallas encountered an internal verification error. Please file a bug at "
        "https://github.com/jax-ml/jax/issues/new/choose. Error details: 'tpu.matmul' op "
        "Expected matmul acc to be 32-bit\n see current operation: %7 = \"tpu.matmul\"(%2)"),
        where=(str(ROOT / "reference" / "matmul.py"), 1))
    finding = explain(error, [], ROOT)
    assert finding.kind == "lowering_matmul_acc"
    assert "preferred_element_type=jnp.float32" in finding.says
    text = " ".join(f"{label} {fact}" for label, fact in finding.facts) + finding.says
    assert "file a bug" not in text and "current operation" not in text
    assert finding.where == "reference/matmul.py:1"


def test_an_unknown_lowering_error_keeps_its_message():
    from pytest_pallas_hints.checking import LoweringFailed

    finding = explain(LoweringFailed(ValueError("Unsupported shape cast")), [], ROOT)
    assert finding.kind == "lowering" and "Unsupported shape cast" in finding.says


def test_a_read_past_a_buffer_inside_a_kernel_is_not_an_index_map_error():
    error = RuntimeError("Out-of-bounds read of (0 0 vmem 102): reading [(slice(8, 9, 1), "
                         "slice(0, 128, 1))] but buffer has shape (8, 128).")
    finding = explain(error, [], ROOT)
    assert finding.kind == "out_of_bounds_ref"
    assert "(8, 128)" in finding.says and "loop bound" in finding.says


def test_a_static_slice_past_a_ref_is_named_as_such():
    """JAX refuses a pl.ds whose static end lies past its ref while the kernel is traced."""
    error = ValueError("Out of bound slice: start=2, size=4, stride=1, dim=5.")
    finding = explain(error, [], ROOT)
    assert finding.kind == "out_of_bounds_ref"
    assert "starts at 2 and takes 4 elements 1 apart" in finding.says
    assert "on a dim of 5" in finding.says


def test_an_index_map_called_with_more_arguments_than_it_takes_is_explained():
    error = TypeError("flash_block_mask.<locals>.kv_index_map() takes 4 positional "
                      "arguments but 5 were given")
    finding = explain(error, [], ROOT)
    assert finding.kind == "arity"
    assert "kv_index_map() takes 4 arguments but was called with 5" in finding.says
    assert "scalar-prefetch operand" in finding.says


def test_an_unknown_error_keeps_its_first_line():
    finding = explain(KeyError("bm"), frames_in(code="bm = cfg['bm']"), ROOT)
    assert finding.kind == "error"
    assert "KeyError: 'bm'" in finding.says


def test_small_unbiased_errors_everywhere_read_as_rounding_and_a_bias_does_not():
    rng = np.random.default_rng(0)
    expected = rng.normal(size=(64, 256)).astype(np.float32)
    rounded = (expected + rng.normal(size=expected.shape) * 3e-3).astype(np.float32)
    findings = diagnose.compare(rounded, expected, blocks=(16, 128), axes="i j")
    assert findings[0].kind == "rounding" and "bf16 rounding" in findings[0].says
    shrunk = (expected * 0.99).astype(np.float32)   # a missing rescale: one direction
    assert "rounding" not in [f.kind for f in diagnose.compare(shrunk, expected,
                                                                blocks=(16, 128), axes="i j")]


def test_nan_and_finite_errors_count_their_own_blocks():
    expected = np.ones((16, 128), np.float32)
    yours = expected.copy()
    yours[:8] = np.nan          # block 0: NaN
    yours[8:, :4] = 5.0         # block 1: finite and wrong
    rows = dict(row for f in diagnose.compare(yours, expected, blocks=(8, 128), axes="i j")
                for row in f.facts)
    assert rows["nan"].endswith("in 1 of 2 output blocks")
    assert rows["error"].endswith("in 1 of 2 output blocks")


def test_a_reduction_that_dropped_its_dim_names_keepdims():
    error = ValueError("Incompatible shapes for broadcasting: shapes=[(8, 384), (8,)]")
    finding = explain(error, [], ROOT)
    assert finding.kind == "broadcast" and "keepdims=True" in finding.says
    other = explain(ValueError("Incompatible shapes for broadcasting: shapes=[(8, 384), "
                               "(8, 128)]"), [], ROOT)
    assert other.kind == "broadcast" and "keepdims" not in other.says


def test_custom_vjp_mistakes_say_what_the_rule_needs():
    structure = TypeError(
        "Custom VJP bwd rule must produce an output with the same container (pytree) "
        "structure as the args tuple of the primal function, and in particular must "
        "produce a tuple of length equal to the number of arguments to the primal "
        "function, but got bwd output structure PyTreeDef((*, *)) for primal input "
        "structure PyTreeDef((*, *, *)).")
    finding = explain(structure, [], ROOT)
    assert finding.kind == "vjp_structure" and "one gradient per argument" in finding.says
    assert "PyTreeDef((*, *, *))" in finding.says
    linear = ValueError("Linearization failed to produce known values for all output "
                        "primals. This is typically caused by ...")
    assert "jax.custom_vjp" in explain(linear, [], ROOT).says


def test_rounding_is_named_only_where_the_program_holds_a_narrow_float():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(64, 128)).astype(np.float32)
    y = (e + rng.normal(size=e.shape) * 1e-2).astype(np.float32)
    assert compare(y, e, tolerance=1e-5)[0].kind == "rounding"
    assert compare(y, e, tolerance=1e-5, narrow=True)[0].kind == "rounding"
    assert compare(y, e, tolerance=1e-5, narrow=False)[0].kind != "rounding"
