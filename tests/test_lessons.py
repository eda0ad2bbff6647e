"""The checks that measure a lesson itself, on small kernels of their own: overlap is
compute done while a copy is in flight, VMEM is every allocation, precision is the
dtype of what a kernel carries from step to step, an operand is found by which input
it is."""
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_pallas_hints import checking, jaxcompat, structure
from pytest_pallas_hints.checking import Diagnosed, check_overlap, check_vmem, measure

CHUNK, CHUNKS, D = 8, 4, 128


def chunk_copy(x_hbm, buffers, sems, i, slot):
    return pltpu.make_async_copy(x_hbm.at[pl.ds(i * CHUNK, CHUNK)], buffers.at[slot],
                                 sems.at[slot])


def double_buffered(x_hbm, o_ref, buffers, sems):
    chunk_copy(x_hbm, buffers, sems, 0, 0).start()

    def step(i, total):
        @pl.when(i + 1 < CHUNKS)
        def _():
            chunk_copy(x_hbm, buffers, sems, i + 1, (i + 1) % 2).start()
        chunk_copy(x_hbm, buffers, sems, i, i % 2).wait()
        return total + jnp.sum(buffers[i % 2], axis=0, keepdims=True)

    o_ref[...] = jax.lax.fori_loop(0, CHUNKS, step, jnp.zeros((1, D), jnp.float32))


def all_then_compute(x_hbm, o_ref, buffers, sems):
    """Every copy started, every copy waited, then the sums: nothing overlaps."""
    for i in range(CHUNKS):
        chunk_copy(x_hbm, buffers, sems, i, i).start()
    for i in range(CHUNKS):
        chunk_copy(x_hbm, buffers, sems, i, i).wait()
    total = jnp.zeros((1, D), jnp.float32)
    for i in range(CHUNKS):
        total = total + jnp.sum(buffers[i], axis=0, keepdims=True)
    o_ref[...] = total


def all_in_a_scoped_buffer(x_hbm, o_ref):
    def body(buffers, sems):
        all_then_compute(x_hbm, o_ref, buffers, sems)
    pl.run_scoped(body, pltpu.VMEM((CHUNKS, CHUNK, D), jnp.float32),
                  pltpu.SemaphoreType.DMA((CHUNKS,)))


def column_sum(kernel, slots):
    def call(x):
        scratch = [pltpu.VMEM((slots, CHUNK, D), jnp.float32),
                   pltpu.SemaphoreType.DMA((slots,))] if slots else []
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1, D), jnp.float32),
                              in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                              scratch_shapes=scratch)(x)
    return call


X = np.arange(CHUNKS * CHUNK * D, dtype=np.float32).reshape(CHUNKS * CHUNK, D) / 1000


@pytest.mark.parametrize("kernel, slots, overlaps", [
    (double_buffered, 2, True), (all_then_compute, CHUNKS, False),
    (all_in_a_scoped_buffer, 0, False)])
def test_overlap_is_compute_while_a_copy_is_in_flight(kernel, slots, overlaps):
    ran = measure(column_sum(kernel, slots), X, structure=None)
    np.testing.assert_allclose(ran.output, X.sum(axis=0, keepdims=True), rtol=1e-5)
    assert max(c.most_in_flight for c in ran.counts) >= 2   # copies together, every time
    if overlaps:
        check_overlap(ran, work="reduce_sum", at_least=CHUNKS - 1, why="")
    else:
        with pytest.raises(Diagnosed) as failed:
            check_overlap(ran, work="reduce_sum", at_least=CHUNKS - 1, why="Start it early.")
        assert failed.value.kind == "not_overlapped"
        assert "0 of 4 times" in failed.value.says and "Start it early." in failed.value.says


def test_vmem_counts_scratch_run_scoped_buffers_and_double_buffered_blocks():
    budget = 2 * CHUNK * D * 4 + 2 * D * 4   # two slots, and the (1, D) output twice
    check_vmem(measure(column_sum(double_buffered, 2), X, structure=None), most=budget, why="")
    for kernel, slots, what in ((all_then_compute, CHUNKS, "buffers"),
                                (all_in_a_scoped_buffer, 0, "pl.run_scoped buffers")):
        ran = measure(column_sum(kernel, slots), X, structure=None)
        assert ran.vmem[0].total == X.nbytes + 2 * D * 4
        with pytest.raises(Diagnosed) as failed:
            check_vmem(ran, most=budget, why="two slots of one chunk.")
        assert failed.value.kind == "vmem" and what in str(failed.value.facts)


# ---------------------------------------------------------------- precision ---

def accumulate(acc_dtype, *, carry=False, masked_store=False):
    """A sum over a K grid axis into an accumulator of `acc_dtype` (a scratch, or a
    fori_loop carry); or a bf16 output updated by a masked store only."""
    def kernel(x_ref, o_ref, acc_ref):
        k = pl.program_id(0)
        if masked_store:
            rows = jax.lax.broadcasted_iota(jnp.int32, o_ref.shape, 0) < 4
            o_ref[...] = jnp.where(rows, x_ref[...].astype(o_ref.dtype), o_ref[...])
            return
        if carry:
            total = jax.lax.fori_loop(0, 4, lambda i, t: t + x_ref[...].astype(acc_dtype),
                                      jnp.zeros(o_ref.shape, acc_dtype))
            o_ref[...] = total.astype(o_ref.dtype)
            return

        @pl.when(k == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)
        acc_ref[...] += x_ref[...].astype(acc_dtype)
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    def call(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.bfloat16),
                              grid=(2,), in_specs=[pl.BlockSpec((8, 128), lambda k: (0, k))],
                              out_specs=pl.BlockSpec((8, 128), lambda k: (0, 0)),
                              scratch_shapes=[pltpu.VMEM((8, 128), acc_dtype)])(x)
    return call


@pytest.mark.parametrize("acc_dtype, options, flagged", [
    (jnp.float32, {}, None), (jnp.bfloat16, {}, "acc_ref"),
    (jnp.float32, {"carry": True}, None),
    (jnp.bfloat16, {"carry": True}, "a loop carry"),
    (jnp.float32, {"masked_store": True}, None)])
def test_precision_is_the_dtype_of_what_a_kernel_carries(acc_dtype, options, flagged):
    x = jnp.ones((8, 256), jnp.bfloat16)
    program = checking._trace(accumulate(acc_dtype, **options), (x,), {})
    findings = structure.check(program, structure.Structure())
    if flagged is None:
        assert not findings
    else:
        assert findings[0].kind == "precision" and flagged in findings[0].says
        assert "bfloat16" in findings[0].says


def updated(how):
    """A float32 accumulator over a K grid axis of bf16 blocks, its update written
    several ways: in float32 (right), through a dot of the bf16 blocks with a float32
    result (right), or through bfloat16 values on the way (the sum itself in bf16, the
    block's square in bf16, the state cast down and back up, a loop carry in float32
    whose additions are bf16)."""
    def kernel(x_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)
        x, acc = x_ref[...], acc_ref[...]
        if how == "float32":
            acc_ref[...] = acc + x.astype(jnp.float32) * x.astype(jnp.float32)
        elif how == "dot":
            acc_ref[...] = acc + jnp.dot(x, x.T, preferred_element_type=jnp.float32)[:, :1]
        elif how == "sum in bf16":
            acc_ref[...] = (acc.astype(jnp.bfloat16) + x).astype(jnp.float32)
        elif how == "square in bf16":
            acc_ref[...] = acc + (x * x).astype(jnp.float32)
        elif how == "cast down and up":
            acc_ref[...] = acc.astype(jnp.bfloat16).astype(jnp.float32) + x.astype(jnp.float32)
        elif how == "carry":
            acc_ref[...] = jax.lax.fori_loop(
                0, 2, lambda i, t: (t.astype(jnp.bfloat16) + x).astype(jnp.float32), acc)
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)   # one cast, when stored: fine

    def call(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.bfloat16),
                              grid=(2,), in_specs=[pl.BlockSpec((8, 128), lambda k: (0, k))],
                              out_specs=pl.BlockSpec((8, 128), lambda k: (0, 0)),
                              scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])(x)
    return call


@pytest.mark.parametrize("how, rounded", [
    ("float32", None), ("dot", None), ("sum in bf16", "an addition"),
    ("square in bf16", "a multiplication"), ("cast down and up", "cast down"),
    ("carry", "an addition")])
def test_precision_is_what_the_update_goes_through(how, rounded):
    """A float32 buffer whose update is computed in bfloat16 is named, with the line that
    rounds; bf16 operands of a dot with a float32 result, and the cast of what is
    stored, are not rounding on the way."""
    x = jnp.ones((8, 256), jnp.bfloat16)
    program = checking._trace(updated(how), (x,), {})
    findings = structure.check(program, structure.Structure(),
                               sources={pathlib.Path(__file__)})
    if rounded is None:
        assert not findings
    else:
        (finding,) = findings
        assert finding.kind == "rounded_state" and rounded in finding.says
        assert "float32, but its update is computed in bfloat16" in finding.says
        assert "test_lessons.py:" in dict(finding.facts)["rounded"]


def scaled_sum(every_step, *, carry=False):
    """A sum over a K grid axis of x's blocks, times a scale s: once, at the end, or
    at every step (into a scratch, or into a fori_loop carry); s passed before x."""
    def kernel(s_ref, x_ref, o_ref, acc_ref):
        k = pl.program_id(0)

        @pl.when(k == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)
        x = x_ref[...]
        if carry:
            acc_ref[...] = jax.lax.fori_loop(0, 2, lambda i, t: t + x * s_ref[...],
                                             acc_ref[...])
        else:
            acc_ref[...] += x * s_ref[...] if every_step else x

        @pl.when(k == pl.num_programs(0) - 1)
        def _():
            o_ref[...] = acc_ref[...] if every_step else acc_ref[...] * s_ref[...]

    def call(x, s):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), grid=(2,),
            in_specs=[pl.BlockSpec((1, 128), lambda k: (0, 0)),
                      pl.BlockSpec((8, 128), lambda k: (0, k))],
            out_specs=pl.BlockSpec((8, 128), lambda k: (0, 0)),
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])(s, x)
    return call


@pytest.mark.parametrize("every_step, carry", [(False, False), (True, False), (True, True)])
def test_what_feeds_a_carried_state_is_found_by_which_input_it_is(every_step, carry):
    x, s = np.ones((8, 256), np.float32), np.full((1, 128), 2.0, np.float32)
    ran = measure(scaled_sum(every_step, carry=carry), x, s, structure=None)
    assert "acc_ref" in [what for what, _ in ran.state_fed_by(x)]
    fed_by_s = ran.state_fed_by(s)
    if every_step:
        assert "acc_ref" in [what for what, _ in fed_by_s]
        assert all(dtype == jnp.float32 for _, dtype in fed_by_s)
        if carry:
            assert "a loop carry (lax.fori_loop)" in [what for what, _ in fed_by_s]
    else:
        assert fed_by_s == []   # read only to scale the finished sum: not carried


# ------------------------------------------------------ operands by identity ---

def attention_like(order):
    """q, k and v as operands in any order, and an extra operand of zeros in front."""
    def kernel(*refs):
        *ins, o_ref = refs
        named = dict(zip(order, ins[1:]))
        o_ref[...] = named["q"][...] + named["k"][...] + 2 * named["v"][...] + ins[0][...]

    def call(q, k, v):
        arrays = {"q": q, "k": k, "v": v}
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
                              grid=(q.shape[0] // 8,), in_specs=[spec] * 4, out_specs=spec)(
            jnp.zeros_like(q), *(arrays[name] for name in order))
    return call


@pytest.mark.parametrize("order", [("q", "k", "v"), ("v", "q", "k")])
def test_an_operand_is_found_by_which_input_it_is(order):
    q, k, v = (np.full((16, 128), n, np.float32) for n in (1, 2, 3))
    ran = measure(attention_like(order), q, k, v, structure=None)
    for array, name in ((q, "q"), (k, "k"), (v, "v")):
        (block,) = ran.blocks_from(array)
        assert ran.program.sites[0].call.blocks.index(block) == 1 + order.index(name)
        assert ran.bytes_from(array) == array.nbytes
    (zeros,) = ran.blocks_from(None)   # built inside the function: from no argument
    assert zeros.is_input


def test_the_first_argument_is_found_through_an_inlined_call():
    """jnp.pad is a jitted function, inlined when read: the program's first input (its
    graph node 0) must keep its lineage through it, like every other input."""
    def padded_call(q, k):
        q, k = jnp.pad(q, ((0, 8), (0, 0))), jnp.pad(k, ((0, 8), (0, 0)))
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(lambda q_ref, k_ref, o_ref: o_ref.__setitem__(
            ..., q_ref[...] + k_ref[...]), out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
            grid=(q.shape[0] // 8,), in_specs=[spec] * 2, out_specs=spec)(q, k)

    q, k = (np.full((16, 128), n, np.float32) for n in (1, 2))
    ran = measure(padded_call, q, k, structure=None)
    assert len(ran.blocks_from(q)) == len(ran.blocks_from(k)) == 1
    assert ran.blocks_from(None) == []


def doubled_inside_a_jit(x, y):
    """The first argument reaches the kernel through a call (a jit, as custom_vjp's
    forward does), doubled there in plain JAX."""
    @jax.jit
    def inner(x, y):
        return pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(
            x * 2.0)
    return inner(x, y)


def test_the_first_argument_keeps_its_identity_through_a_call():
    x, y = np.ones((8, 128), np.float32), np.zeros((8, 128), np.float32)
    ran = measure(doubled_inside_a_jit, x, y, structure=None)
    assert len(ran.blocks_from(x)) == 1 and not ran.blocks_from(y)
    findings = structure.check(ran.program, structure.Structure())
    assert findings and findings[0].kind == "outside" and findings[0].detail == "mul"


def test_dma_bytes_are_found_by_which_input_they_copy():
    ran = measure(column_sum(double_buffered, 2), X, structure=None)
    assert ran.bytes_from(X) == X.nbytes
    with pytest.raises(checking.KitError):
        ran.bytes_from(np.zeros(3))



# ------------------------------------------------- metadata is integers only ---

def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def gather_smuggled_as_integers(table, ids):
    """The gather done outside the kernel on the table's bits: integer ops only."""
    bits = jax.lax.bitcast_convert_type(table, jnp.int32)[ids]
    rows = jax.lax.bitcast_convert_type(bits, jnp.float32)
    return pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(rows.shape, rows.dtype))(
        rows)


def test_float_data_bitcast_to_integers_is_not_metadata():
    table = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6], np.int32)
    program = checking._trace(gather_smuggled_as_integers, (table, ids), {})
    findings = structure.check(program, structure.Structure(outside={"metadata"}))
    assert findings and findings[0].kind == "outside"
    assert "gather" in findings[0].says


def gather_in_jnp(table, ids):
    rows = jnp.take(table, ids, axis=0)   # index arithmetic (ids < 0 wraps) and a gather
    return pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(rows.shape, rows.dtype))(
        rows)


def test_work_on_data_outside_is_named_before_index_arithmetic():
    table = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6], np.int32)
    findings = structure.check(checking._trace(gather_in_jnp, (table, ids), {}),
                               structure.Structure())
    assert findings[0].kind == "outside" and findings[0].detail == "gather"


# --------------------------------------------- found before the run, or proven ---

def table_reader(offset):
    """Each grid step reads ids[i + offset] from SMEM: past the end for the last steps."""
    def kernel(ids_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] + ids_ref[pl.program_id(0) + offset].astype(jnp.float32)

    def call(ids, x):
        spec = pl.BlockSpec((8, 128), lambda i, ids: (i, 0))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid_spec=pltpu.PrefetchScalarGridSpec(
                                  num_scalar_prefetch=1, grid=(x.shape[0] // 8,),
                                  in_specs=[spec], out_specs=spec))(ids, x)
    return call


def test_a_read_past_the_end_is_named_with_its_line_before_the_run():
    ids, x = np.arange(4, dtype=np.int32), np.zeros((32, 128), np.float32)
    measure(table_reader(0), ids, x, structure=None)
    with pytest.raises(Diagnosed) as failed:
        measure(table_reader(1), ids, x, structure=None)
    finding = failed.value.findings()[0]
    assert finding.kind == "out_of_bounds_ref"
    assert dict(finding.facts)["index"] == "index 4 along dim 0, which has 4"
    assert "ids_ref[pl.program_id(0) + offset]" in dict(finding.facts)["reads"]


def cumsum_table_reader(offset):
    """The table the kernel reads is computed around it (a cumsum, as grouped matmul's
    metadata is), and each step reads ids[i + offset]."""
    def call(sizes, x):
        return table_reader(offset)(jnp.cumsum(sizes).astype(jnp.int32).reshape(-1), x)
    return call


@pytest.mark.parametrize("offset, index", [(-1, "index -1 along dim 0, which has 4"),
                                           (1, "index 4 along dim 0, which has 4")])
def test_a_read_past_either_end_of_a_computed_table_is_named_before_the_run(offset, index):
    """The table's values follow from the integer inputs by ops the walk does not model
    itself (JAX runs them), so the kernel is walked before it runs: a read at -1 (which
    the interpreter would wrap around, unseen) is named like a read at the size."""
    sizes, x = np.ones(4, np.int32), np.zeros((32, 128), np.float32)
    measure(cumsum_table_reader(0), sizes, x, structure=None)
    with pytest.raises(Diagnosed) as failed:
        measure(cumsum_table_reader(offset), sizes, x, structure=None)
    finding = failed.value.findings()[0]
    assert finding.kind == "out_of_bounds_ref"
    assert dict(finding.facts)["index"] == index


def interleave(first):
    """Stores two (8, 128) halves into the even and odd rows of a (16, 128) scratch, the
    second half from row ``first`` + 1 with stride 2: inside the ref for first = 0."""
    def kernel(x_ref, o_ref, rows_ref):
        start = pl.program_id(0) + first   # traced: JAX cannot check it before the walk
        rows_ref[pl.ds(start, 8, stride=2), :] = x_ref[:8]
        rows_ref[pl.ds(start + 1, 8, stride=2), :] = x_ref[8:]
        o_ref[...] = rows_ref[...]

    def call(x):
        whole = pl.BlockSpec(x.shape, lambda i: (0, 0))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(1,), in_specs=[whole], out_specs=whole,
                              scratch_shapes=[pltpu.VMEM(x.shape, x.dtype)])(x)
    return call


def test_a_strided_slice_ends_at_its_last_element():
    """pl.ds(1, 8, stride=2) picks rows 1, 3, ..., 15 of 16: inside the ref, though
    1 + 8 * 2 = 17 is past its end. One step further, it is past the end."""
    x = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)
    ran = measure(interleave(0), x, structure=None)
    assert np.array_equal(np.asarray(ran.output)[0::2], x[:8])
    assert np.array_equal(np.asarray(ran.output)[1::2], x[8:])
    with pytest.raises(Diagnosed) as failed:
        measure(interleave(1), x, structure=None)
    finding = failed.value.findings()[0]
    assert finding.kind == "out_of_bounds_ref"
    assert dict(finding.facts)["index"] == "index 2:17 along dim 0, which has 16"


def test_a_learners_failed_kernel_is_never_called_a_kit_problem(monkeypatch):
    """Unseen before the run, the read fails while the kernel runs and leaves the
    simulated TPU dirty; the kit proves its own kernel still runs (in a clean state)
    before it would blame itself."""
    monkeypatch.setattr(checking, "WALK_BEFORE", 0)
    monkeypatch.setattr(checking, "_MACHINERY_RAN", [])
    ids, x = np.arange(4, dtype=np.int32), np.zeros((32, 128), np.float32)
    with pytest.raises(Exception) as failed:
        measure(table_reader(1), ids, x, structure=None)
    assert not isinstance(failed.value, checking.KitError), failed.value
    assert checking._MACHINERY_RAN


# --------------------------------------------- an output never stored, or NaN stored ---

def summed_rows(store_axis, scratch_first=False):
    """Sums x's 4 column blocks into o through a scratch, storing at the last step of
    ``store_axis``'s length (1, the column axis: right; 0 names the row axis, whose
    length 8 the column index never reaches); scratch_first: the scratch is added to
    before anything was written to it (NaN, stored)."""
    def kernel(x_ref, o_ref, acc_ref):
        j = pl.program_id(1)

        @pl.when(j == 0)
        def start():
            acc_ref[...] = jnp.zeros_like(acc_ref) if not scratch_first else acc_ref[...]

        acc_ref[...] += x_ref[...]

        @pl.when(j == pl.num_programs(store_axis) - 1)
        def store():
            o_ref[...] = acc_ref[...]

    def call(x):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((64, 128), x.dtype), grid=(8, 4),
            in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
            out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, 0)),
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])(x)
    return call


@pytest.mark.parametrize("store_axis, scratch_first, kind, detail", [
    (0, False, "never_stored", "no_store"),   # the store's condition never holds
    (1, True, "nan", ""),                     # stored, but the NaN of a fresh scratch
])
def test_an_all_nan_output_says_whether_any_step_stored_it(store_axis, scratch_first, kind,
                                                           detail):
    x = np.ones((64, 512), np.float32)
    ran = measure(summed_rows(store_axis, scratch_first), x, structure=None)
    expected = x.reshape(64, 4, 128).sum(axis=1)
    with pytest.raises(checking.Mismatch) as failed:
        checking.check(ran, expected)
    finding = failed.value.findings()[0]
    assert (finding.kind, finding.detail) == (kind, detail)
    block = next(b for b in ran.program.sites[0].call.blocks if not b.is_input)
    assert ran.stored_blocks(block) == (set() if store_axis == 0 else
                                        {(i, 0) for i in range(8)})


def test_the_blocks_an_index_map_names_are_found_per_grid_step():
    x = np.ones((64, 512), np.float32)
    ran = measure(summed_rows(1), x, structure=None)
    (steps, indices), = ran.block_indices(ran.blocks_from(x)[0])
    assert steps.tolist()[:5] == [[0, 0], [0, 1], [0, 2], [0, 3], [1, 0]]
    assert indices.tolist() == steps.tolist()        # x's index map is (i, j)
    block = next(b for b in ran.program.sites[0].call.blocks if not b.is_input)
    (_, indices), = ran.block_indices(block)
    assert indices.tolist() == [[i, 0] for i in range(8) for _ in range(4)]


# ------------------------------------------------------------------ used work ---

def matmul_steps(how):
    """A (2,) grid over K of (8, 128) x (128, 128) dots, the product accumulated in a
    scratch and stored at the last step, with a second dot that ``how`` throws away (or,
    "state", a state whose last update no later step reads, as a chunked recurrence's)."""
    def kernel(a_ref, b_ref, o_ref, acc_ref, junk_ref):
        k = pl.program_id(0)
        product = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
        decoy = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

        @pl.when(k == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)
            junk_ref[...] = jnp.zeros_like(junk_ref)

        if how == "times_zero":
            product = product + 0.0 * decoy
        elif how == "never_stored":
            junk_ref[...] += decoy
        elif how == "minus_itself":
            product = product + (decoy - decoy)
        elif how == "dropped_by_where":
            product = product + jnp.where(k < 0, decoy, 0.0)
        elif how == "added_and_subtracted":
            product = (product + 2.0 * decoy) - decoy * 2.0
        elif how == "rounding_error":     # not zero: what bf16 loses of the decoy
            product = product + (decoy - decoy.astype(jnp.bfloat16).astype(jnp.float32))
        elif how == "used_at_one_step":   # the decoy enters the output at step 0 only
            product = jnp.where(k == 0, product + decoy, product)
        elif how == "state":              # read at the next step: the last update is dead
            product = product + junk_ref[...] * 0.5
            junk_ref[...] = decoy
        elif how == "scaled_away":        # reaches the output, and rounds away there
            product = product + decoy * 2.0 ** -60
        elif how == "never_picked":       # a maximum that always picks the other side
            product = jnp.maximum(product, decoy - 2.0 ** 30)
        elif how == "identity":           # the MXU passes the answer through an identity
            eye = (jax.lax.broadcasted_iota(jnp.int32, (128, 128), 0)
                   == jax.lax.broadcasted_iota(jnp.int32, (128, 128), 1))
            product = jnp.dot(product, eye.astype(jnp.float32),
                              preferred_element_type=jnp.float32) + decoy
        acc_ref[...] += product

        @pl.when(k == pl.num_programs(0) - 1)
        def _():
            o_ref[...] = acc_ref[...]

    def call(a, b):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda k: (0, k)),
                      pl.BlockSpec((128, 128), lambda k: (k, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda k: (0, 0)),
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)] * 2)(a, b)
    return call


A, B = np.ones((8, 256), np.float32), np.ones((256, 128), np.float32)
DOT = 2 * 8 * 128 * 128   # one (8, 128) x (128, 128) dot


@pytest.mark.parametrize("how, used", [
    ("times_zero", 2), ("never_stored", 2), ("minus_itself", 2), ("dropped_by_where", 2),
    ("added_and_subtracted", 2), ("rounding_error", 4), ("used_at_one_step", 3),
    ("state", 4)])
def test_work_counts_when_its_result_reaches_an_output(how, used):
    ran = measure(matmul_steps(how), A, B, structure=None)
    assert ran.work == 4 * DOT and ran.reaching_work == used * DOT
    if used < 4:
        with pytest.raises(Diagnosed) as failed:
            checking.check_work(ran, flops=4 * DOT)
        assert failed.value.kind == "work_unused"
        assert f"dot flops executed: {4 * DOT:,} · reaching an output: {used * DOT:,}" \
            in str(failed.value.facts)
    elif how == "rounding_error":   # on all-ones inputs bf16 loses nothing of the decoy's
        assert ran.used_work == 2 * DOT   # 128 (or 256): perturbed, it moves nothing
    else:
        assert ran.used_work == 4 * DOT
        checking.check_work(ran, flops=4 * DOT)


@pytest.mark.parametrize("how, says", [
    ("scaled_away", "do not move the output"), ("never_picked", "do not move the output"),
    ("identity", "builds from no input")])
def test_work_that_reaches_an_output_without_moving_it_is_not_used(how, says):
    """A dot's result that reaches the output by every path the walk follows and still
    cannot change it: scaled until it rounds away, behind a maximum that never picks it
    (found by running again with its result perturbed), or a product with a matrix the
    kernel built from nothing (an identity from iota: it only passes a value through)."""
    ran = measure(matmul_steps(how), A, B, structure=None)
    flops = (6 if how == "identity" else 4) * DOT
    assert ran.work == flops
    assert ran.used_work == (4 if how == "identity" else 2) * DOT
    with pytest.raises(Diagnosed, match=says) as failed:
        checking.check_work(ran, flops=flops)
    assert failed.value.kind == "work_unused"


def test_a_perturbable_run_gives_the_programs_output_bit_for_bit():
    """The program with its dots made perturbable gives, with none chosen, exactly the
    output of the program as it is, and another one with a dot chosen; a result that is
    zero stays zero (nothing to double: it computes nothing the output needs)."""
    from pytest_pallas_hints import program as programs

    def kernel(a_ref, b_ref, o_ref):
        zero = jnp.dot(a_ref[...] * 0.0, b_ref[...], preferred_element_type=jnp.float32)
        o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32) \
            + 3.0 * zero

    def call(a, b):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))(a, b)

    a = np.random.default_rng(0).normal(size=(8, 128)).astype(np.float32)
    b = np.random.default_rng(1).normal(size=(128, 128)).astype(np.float32)
    traced = programs.trace(call, (a, b), {})
    plain, _ = programs.execute(traced, (a, b))
    output, _, perturbed = programs.execute_perturbable(traced, (a, b))
    assert np.array_equal(np.asarray(plain), np.asarray(output))
    dots = [id(eqn) for eqn in jaxcompat.equations(traced.sites[0].call.kernel)
            if eqn.primitive.name == "dot_general"]
    assert len(dots) == 2
    assert [checking._moved(output, perturbed({dot})) for dot in dots] == [False, True]
    assert np.array_equal(np.asarray(perturbed(set())), np.asarray(output))


def test_the_dots_of_one_call_are_perturbed_together_and_two_calls_apart():
    """A Python loop traces one call once per iteration: those dots are perturbed in one
    run (what is judged is the dot the learner wrote). Two calls on one line are two
    dots: a decoy beside the real product on its line is still found."""
    from pytest_pallas_hints import program as programs

    def kernel(a_ref, b_ref, o_ref):
        total = jnp.zeros(o_ref.shape, jnp.float32)
        for _ in range(3):
            total += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32) + 2.0 ** -60 * jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)  # noqa: E501
        o_ref[...] = total

    def call(a, b):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))(a, b)

    a = np.random.default_rng(0).normal(size=(8, 128)).astype(np.float32)
    b = np.random.default_rng(1).normal(size=(128, 128)).astype(np.float32)
    traced = programs.trace(call, (a, b), {})
    output, _, perturbed = programs.execute_perturbable(traced, (a, b))
    dots = perturbed.dots
    assert len(dots) == 6
    groups = {perturbed.together[dot] for dot in dots}
    assert sorted(len(group) for group in groups) == [3, 3]
    real, decoy = sorted(groups, key=lambda group: min(dots.index(d) for d in group))
    assert checking._moved(output, perturbed(real))
    assert not checking._moved(output, perturbed(decoy))


def test_work_copied_out_by_a_dma_reaches_the_output():
    def kernel(a_ref, b_ref, o_hbm, buffer, sem):
        buffer[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
        copy = pltpu.make_async_copy(buffer, o_hbm, sem)
        copy.start()
        copy.wait()

    def call(a, b):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA(())])(a, b)

    ran = measure(call, A[:, :128], B[:128], structure=None)
    assert ran.work == ran.used_work == DOT
