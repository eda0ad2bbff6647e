"""The DMA ledger (walk.Ledger, checked by measure before a kernel runs): an unmatched
start or wait is named with its line, before the interpreter would hang on it, return
NaN, or let two copies race; kernels that pair every start with its wait (by hand,
across grid steps, or through pltpu.emit_pipeline) pass, and their overlap is counted."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_pallas_hints import runtime
from pytest_pallas_hints.checking import Diagnosed, measure

ROWS, D = 8, 128


@pytest.fixture(autouse=True, scope="module")
def interpret_mode():
    runtime.use_interpret_mode(True)


def two_slot_call(x, *, kernel):
    """x [2, ROWS, D] left in HBM; a (2, ROWS, D) VMEM buffer and two DMA semaphores."""
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((ROWS, D), x.dtype), grid=(1,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((2, ROWS, D), x.dtype), pltpu.SemaphoreType.DMA((2,))])(x)


def copies(x_hbm, buf, sems):
    """Row block 0 into slot 0 on semaphore 0; row block 1 into slot 0 or slot 1 on
    semaphore 1."""
    return (pltpu.make_async_copy(x_hbm.at[0], buf.at[0], sems.at[0]),
            pltpu.make_async_copy(x_hbm.at[1], buf.at[0], sems.at[1]),
            pltpu.make_async_copy(x_hbm.at[1], buf.at[1], sems.at[1]))


def paired_kernel(x_hbm, o_ref, buf, sems):
    first, _, second = copies(x_hbm, buf, sems)
    first.start()
    second.start()
    first.wait()
    second.wait()
    o_ref[...] = buf[0] + buf[1]


def wait_first_kernel(x_hbm, o_ref, buf, sems):
    first, _, _ = copies(x_hbm, buf, sems)
    first.wait()  # the line named
    first.start()
    o_ref[...] = buf[0]


def wrong_semaphore_kernel(x_hbm, o_ref, buf, sems):
    first, into_slot_0, _ = copies(x_hbm, buf, sems)
    first.start()
    into_slot_0.wait()  # semaphore 1: nothing signals it
    o_ref[...] = buf[0]


def unwaited_kernel(x_hbm, o_ref, buf, sems):
    first, _, _ = copies(x_hbm, buf, sems)
    first.start()  # the line named
    o_ref[...] = buf[0]


def same_slot_kernel(x_hbm, o_ref, buf, sems):
    first, into_slot_0, _ = copies(x_hbm, buf, sems)
    first.start()
    into_slot_0.start()  # slot 0 again, while the first copy is in flight
    first.wait()
    into_slot_0.wait()
    o_ref[...] = buf[0]


def waited_twice_kernel(x_hbm, o_ref, buf, sems):
    first, _, _ = copies(x_hbm, buf, sems)
    first.start()
    first.wait()
    first.wait()  # the line named: the copy was already taken by the wait above
    o_ref[...] = buf[0]


def semaphore_before_the_first_kernel(x_hbm, o_ref, buf, sems):
    slot = pl.program_id(0) - 1   # -1 at grid step 0: no wrap-around in a kernel
    copy = pltpu.make_async_copy(x_hbm.at[0], buf.at[0], sems.at[slot])
    copy.start()  # the line named
    copy.wait()
    o_ref[...] = buf[0]


def diagnosis(kernel):
    x = np.arange(2 * ROWS * D, dtype=np.float32).reshape(2, ROWS, D)
    with pytest.raises(Diagnosed) as info:
        measure(two_slot_call, x, kernel=kernel, structure=None)
    return info.value.findings()[0]


def line_of(function, text):
    import inspect

    lines, start = inspect.getsourcelines(function)
    return start + next(n for n, line in enumerate(lines) if text in line)


def test_paired_copies_pass_and_their_overlap_is_counted():
    x = np.arange(2 * ROWS * D, dtype=np.float32).reshape(2, ROWS, D)
    ran = measure(two_slot_call, x, kernel=paired_kernel, structure=None)
    np.testing.assert_array_equal(np.asarray(ran.output), x[0] + x[1])
    assert ran.counts[0].most_in_flight == 2 and not ran.counts[0].dma_problems


@pytest.mark.parametrize("kernel, kind, label, text", [
    (wait_first_kernel, "dma_never_started", "waits", "first.wait()"),
    (wrong_semaphore_kernel, "dma_never_started", "waits", "into_slot_0.wait()"),
    (unwaited_kernel, "dma_not_waited", "started", "first.start()"),
    (same_slot_kernel, "dma_overwrite", "started", "into_slot_0.start()"),
    (waited_twice_kernel, "dma_waited_twice", "waits", "first.wait()  # the line named"),
    (semaphore_before_the_first_kernel, "dma_out_of_bounds", "started", "copy.start()"),
], ids=["wait before start", "wait on another semaphore", "never waited", "slot reused",
        "waited twice",
        "semaphore index -1"])
def test_an_unmatched_start_or_wait_is_named_with_its_line_before_the_kernel_runs(
        kernel, kind, label, text):
    finding = diagnosis(kernel)
    assert finding.kind == kind
    facts = dict(finding.facts)
    assert facts[label].startswith(f"tests/test_dma_ledger.py:{line_of(kernel, text)} ")
    assert text in facts[label]
    if kind == "dma_overwrite":
        assert "first.start()" in facts["in flight"]
    if kind == "dma_waited_twice":
        assert facts["waited"].startswith(
            f"tests/test_dma_ledger.py:{line_of(kernel, 'first.wait()')} ")
    if kind == "dma_out_of_bounds":
        assert facts["window"] == "semaphore [(-1, 0)] of a ref of shape (2,)"


def read_and_write_on_one_semaphore(x, *, separate):
    """Row block 0 read into VMEM while slot 1 is written out to HBM: on one DMA
    semaphore (a wait could return when the other copy landed) or on one each."""
    def kernel(x_hbm, o_hbm, buf, sems):
        read = pltpu.make_async_copy(x_hbm.at[0], buf.at[0], sems.at[0])
        write = pltpu.make_async_copy(buf.at[1], o_hbm, sems.at[1 if separate else 0])
        buf[1] = jnp.ones((ROWS, D), buf.dtype)
        write.start()
        read.start()
        read.wait()  # the line named
        write.wait()

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((ROWS, D), x.dtype), grid=(1,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((2, ROWS, D), x.dtype), pltpu.SemaphoreType.DMA((2,))])(x)


def test_a_wait_on_a_semaphore_that_reads_and_writes_share_is_named():
    x = np.arange(2 * ROWS * D, dtype=np.float32).reshape(2, ROWS, D)
    ran = measure(read_and_write_on_one_semaphore, x, separate=True, structure=None)
    np.testing.assert_array_equal(np.asarray(ran.output), np.ones((ROWS, D)))
    with pytest.raises(Diagnosed) as info:
        measure(read_and_write_on_one_semaphore, x, separate=False, structure=None)
    finding = info.value.findings()[0]
    assert finding.kind == "dma_shared_semaphore"
    facts = dict(finding.facts)
    assert "read.wait()" in facts["waits"] and "write.start()" in facts["also on it"]


def prefetch_next_step_kernel(x_hbm, o_ref, buf, sems):
    """Grid step i waits for row block i and starts row block i + 1 (a copy in flight
    from one grid step to the next, as JAX's paged attention does)."""
    i, n = pl.program_id(0), pl.num_programs(0)

    def copy(block):
        return pltpu.make_async_copy(x_hbm.at[block], buf.at[block % 2], sems.at[block % 2])

    @pl.when(i == 0)
    def first():
        copy(0).start()

    @pl.when(i + 1 < n)
    def next_block():
        copy(i + 1).start()

    copy(i).wait()
    o_ref[...] = buf[i % 2]


def one_copy_too_many_kernel(x_hbm, o_ref, buf, sems):
    """prefetch_next_step_kernel, plus a copy at the last step that nothing waits for."""
    prefetch_next_step_kernel(x_hbm, o_ref, buf, sems)

    @pl.when(pl.program_id(0) == pl.num_programs(0) - 1)
    def extra():
        pltpu.make_async_copy(x_hbm.at[0], buf.at[0], sems.at[0]).start()


def prefetch_next_step(x, *, waits_last):
    kernel = prefetch_next_step_kernel if waits_last else one_copy_too_many_kernel
    n = x.shape[0]
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((n * ROWS, D), x.dtype), grid=(n,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((ROWS, D), lambda i: (i, 0)),
        scratch_shapes=[pltpu.VMEM((2, ROWS, D), x.dtype), pltpu.SemaphoreType.DMA((2,))],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)))(x)


def test_a_copy_started_at_one_grid_step_may_be_waited_at_the_next():
    x = np.arange(4 * ROWS * D, dtype=np.float32).reshape(4, ROWS, D)
    ran = measure(prefetch_next_step, x, waits_last=True, structure=None)
    np.testing.assert_array_equal(np.asarray(ran.output), x.reshape(-1, D))
    assert ran.counts[0].most_in_flight == 2
    with pytest.raises(Diagnosed) as info:
        measure(prefetch_next_step, x, waits_last=False, structure=None)
    assert info.value.kind == "dma_not_waited"


def gather_kernel(ids_ref, table_hbm, o_ref, rows_vmem, sem, *, rows):
    """Rows of the table picked by scalar-prefetched ids, all on one semaphore."""
    def copy(r):
        return pltpu.make_async_copy(table_hbm.at[pl.ds(ids_ref[r], 1)],
                                     rows_vmem.at[pl.ds(r, 1)], sem)

    for r in range(rows):
        copy(r).start()
    for r in range(rows):
        @pl.when(ids_ref[r] >= 0)  # known from the prefetched ids: always true
        def wait():
            copy(r).wait()
    o_ref[...] = rows_vmem[...]


def gather(table, ids, *, scale_ids):
    rows = ids.shape[0]
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((rows, table.shape[1]), lambda i, ids: (0, 0)),
        scratch_shapes=[pltpu.VMEM((rows, table.shape[1]), table.dtype),
                        pltpu.SemaphoreType.DMA(())])
    return pl.pallas_call(functools.partial(gather_kernel, rows=rows), grid_spec=spec,
                          out_shape=jax.ShapeDtypeStruct((rows, table.shape[1]), table.dtype),
                          )(ids * scale_ids, table)


def test_waits_are_matched_by_bytes_on_a_shared_semaphore_with_prefetched_indices():
    table = np.arange(16 * D, dtype=np.float32).reshape(16, D)
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6], np.int32)
    ran = measure(gather, table, ids, scale_ids=1, structure=None)
    np.testing.assert_array_equal(np.asarray(ran.output), table[ids])
    assert ran.counts[0].most_in_flight == 8
    assert ran.traffic.read == 8 * D * 4


def pipeline_kernel(x_hbm, o_ref, acc_ref, *, chunk):
    acc_ref[...] = jnp.zeros_like(acc_ref)

    def body(x_vmem):
        acc_ref[...] += jnp.sum(x_vmem[...], axis=0, keepdims=True)

    pltpu.emit_pipeline(body, grid=(x_hbm.shape[0] // chunk,),
                        in_specs=[pl.BlockSpec((chunk, D), lambda i: (i, 0))])(x_hbm)
    o_ref[...] = acc_ref[...]


def column_sum(x, *, chunk):
    return pl.pallas_call(
        functools.partial(pipeline_kernel, chunk=chunk),
        out_shape=jax.ShapeDtypeStruct((1, D), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((1, D), jnp.float32)])(x)


def test_emit_pipeline_traces_as_for_a_tpu_and_the_walk_follows_its_copies():
    """emit_pipeline picks its DMA tiling by the chip: the kit traces learner code as
    for a TPU v5e. Its copies (inside run_scoped, in a loop, under conds on the loop
    index) are counted, paired and overlapped."""
    x = np.random.default_rng(0).standard_normal((64, D)).astype(np.float32)
    ran = measure(column_sum, x, chunk=16, structure=None)
    np.testing.assert_allclose(np.asarray(ran.output), x.sum(0, keepdims=True), rtol=1e-5,
                               atol=1e-5)
    counts = ran.counts[0]
    assert not counts.dma_problems and counts.dmas_followed and counts.most_in_flight == 2
    assert ran.traffic.read == x.nbytes


def loop_kernel(x_hbm, o_ref, buf, sems, *, chunks):
    """Chunk by chunk in a fori_loop, double-buffered: the ledger follows the loop."""
    def copy(i):
        return pltpu.make_async_copy(x_hbm.at[i], buf.at[i % 2], sems.at[i % 2])

    copy(0).start()

    def body(i, acc):
        @pl.when(i + 1 < chunks)
        def next_chunk():
            copy(i + 1).start()

        copy(i).wait()
        return acc + buf[i % 2]

    o_ref[...] = lax.fori_loop(0, chunks, body, jnp.zeros((ROWS, D), jnp.float32))


def test_a_double_buffered_fori_loop_passes():
    x = np.arange(4 * ROWS * D, dtype=np.float32).reshape(4, ROWS, D)
    ran = measure(lambda x: pl.pallas_call(
        functools.partial(loop_kernel, chunks=4),
        out_shape=jax.ShapeDtypeStruct((ROWS, D), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((2, ROWS, D), x.dtype), pltpu.SemaphoreType.DMA((2,))])(x),
        x, structure=None)
    np.testing.assert_array_equal(np.asarray(ran.output), x.sum(0))
    assert ran.counts[0].most_in_flight == 2


def test_the_walk_divides_floats_as_floats_and_integers_toward_zero():
    """lax.div on known values: a float quotient is not truncated, and 0 / 0 of a loop
    carry that never ran is a NaN, not a warning turned error."""
    import warnings

    from pytest_pallas_hints import walk

    closed = jax.make_jaxpr(lambda a, b, i, j: (a / b, lax.div(i, j)))(
        np.float32(1), np.float32(1), np.int32(1), np.int32(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quotient, integer = walk.Walk().run(
            closed.jaxpr, closed.consts,
            [np.array([7.0, 0.0], np.float32), np.array([2.0, 0.0], np.float32),
             np.array([-7, 7], np.int32), np.array([2, 2], np.int32)])
    np.testing.assert_array_equal(quotient[:1], [3.5])
    assert np.isnan(quotient[1])
    np.testing.assert_array_equal(integer, [-3, 3])


def slot_in_smem_kernel(x_hbm, o_ref, slot_ref, buf, sems, *, branch_on_data):
    """The slot of a copy kept in an SMEM scratch, as JAX 0.8's emit_pipeline keeps it."""
    slot_ref[0] = 1

    def copy():
        return pltpu.make_async_copy(x_hbm.at[0], buf.at[slot_ref[0]], sems.at[slot_ref[0]])

    copy().start()
    copy().wait()
    if branch_on_data:
        @pl.when(buf[1, 0, 0] > 0)   # loaded data: the slot may change, or not
        def move():
            slot_ref[0] = 0

        copy().start()
        copy().wait()
    o_ref[...] = buf[1]


@pytest.mark.parametrize("branch_on_data", [False, True])
def test_a_small_integer_scratch_is_followed_once_written_whole(branch_on_data):
    """A uint32[1] SMEM scratch written with a known value is known from then on, and the
    copies it indexes are followed; after a branch on loaded data that may write it, it
    is unknown, and the ledger stops (it never guesses)."""
    x = np.arange(2 * ROWS * D, dtype=np.float32).reshape(2, ROWS, D)

    def call(x):
        return pl.pallas_call(
            functools.partial(slot_in_smem_kernel, branch_on_data=branch_on_data),
            out_shape=jax.ShapeDtypeStruct((ROWS, D), x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            scratch_shapes=[pltpu.SMEM((1,), jnp.int32), pltpu.VMEM((2, ROWS, D), x.dtype),
                            pltpu.SemaphoreType.DMA((2,))])(x)

    ran = measure(call, x, structure=None)
    np.testing.assert_array_equal(np.asarray(ran.output), x[0])
    counts = ran.counts[0]
    assert counts.dmas_followed is not branch_on_data
    assert counts.most_in_flight == 1 and not counts.dma_problems


def test_a_prefetched_index_read_past_its_end_is_unknown_to_the_walk():
    """The kit's walk never crashes on a learner's out-of-range read of a prefetched
    array: the value is unknown, and the copy it addresses still counts as started."""
    from pytest_pallas_hints import walk

    def kernel(ids_ref, table_hbm, o_ref, rows_vmem, sem):
        copy = pltpu.make_async_copy(table_hbm.at[pl.ds(ids_ref[8], 1)],   # ids has 8
                                     rows_vmem.at[pl.ds(0, 1)], sem)
        copy.start()
        o_ref[...] = rows_vmem[...]

    table, ids = np.zeros((16, D), np.float32), np.arange(8, dtype=np.int32)
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((8, D), lambda i, ids: (0, 0)),
        scratch_shapes=[pltpu.VMEM((8, D), table.dtype), pltpu.SemaphoreType.DMA(())])
    closed = jax.make_jaxpr(lambda ids, table: pl.pallas_call(
        kernel, grid_spec=spec, out_shape=jax.ShapeDtypeStruct((8, D), table.dtype))(
        ids, table))(ids, table)
    from pytest_pallas_hints import jaxcompat

    call = jaxcompat.kernel_call(closed.jaxpr.eqns[0])
    counts = walk.kernel_counts(call, [ids])
    assert [p.kind for p in counts.dma_problems] == ["dma_not_waited"]
