"""moved_bytes against numbers computed by hand."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_pallas_hints import runtime
from pytest_pallas_hints.checking import TooMuchTraffic, check_traffic
from pytest_pallas_hints import moved_bytes

F32 = 4


@pytest.fixture(autouse=True, scope="module")
def interpret_mode():
    runtime.use_interpret_mode(True)


def by_name(traffic):
    return {(o.kernel, o.name): (o.bytes, o.copies) for o in traffic.operands}


def matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += a_ref[...] @ b_ref[...]

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...]


def matmul(a, b, *, bm, bk, bn):
    (M, K), (_, N) = a.shape, b.shape
    return pl.pallas_call(
        matmul_kernel, out_shape=jax.ShapeDtypeStruct((M, N), a.dtype),
        grid=(M // bm, N // bn, K // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)])(a, b)


def test_tiled_matmul_reads_a_once_per_column_block_and_b_once_per_row_block():
    M, K, N, bm, bk, bn = 64, 256, 384, 16, 128, 128
    a, b = np.ones((M, K), np.float32), np.ones((K, N), np.float32)
    traffic = moved_bytes(matmul, a, b, bm=bm, bk=bk, bn=bn)
    assert by_name(traffic) == {
        ("matmul_kernel", "a_ref"): (M * K * F32 * (N // bn), (M // bm) * (N // bn) * (K // bk)),
        ("matmul_kernel", "b_ref"): (K * N * F32 * (M // bm), (M // bm) * (N // bn) * (K // bk)),
        ("matmul_kernel", "o_ref"): (M * N * F32, (M // bm) * (N // bn)),
    }
    assert traffic.read == (M * K * (N // bn) + K * N * (M // bm)) * F32
    assert traffic.written == M * N * F32


def test_when_k_is_one_block_a_stays_in_vmem_across_j():
    M, K, N, bm, bn = 32, 128, 512, 8, 128
    a, b = np.ones((M, K), np.float32), np.ones((K, N), np.float32)
    traffic = moved_bytes(matmul, a, b, bm=bm, bk=K, bn=bn)
    assert by_name(traffic)[("matmul_kernel", "a_ref")] == (M * K * F32, M // bm)


def add_bias_kernel(x_ref, b_ref, o_ref):
    o_ref[...] = x_ref[...] + b_ref[...]


def add_bias(x, b, *, bm):
    M, D = x.shape
    rows = pl.BlockSpec((bm, D), lambda i: (i, 0))
    return pl.pallas_call(add_bias_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(pl.cdiv(M, bm),),
                          in_specs=[rows, pl.BlockSpec((1, D), lambda i: (0, 0))],
                          out_specs=rows)(x, b)


def test_a_broadcast_operand_is_fetched_once_and_a_partial_block_counts_its_rows():
    M, D, bm = 20, 256, 8  # the last block holds 4 real rows
    x, b = np.ones((M, D), np.float32), np.ones((1, D), np.float32)
    traffic = moved_bytes(add_bias, x, b, bm=bm)
    assert by_name(traffic) == {
        ("add_bias_kernel", "x_ref"): (M * D * F32, 3),
        ("add_bias_kernel", "b_ref"): (D * F32, 1),
        ("add_bias_kernel", "o_ref"): (M * D * F32, 3),
    }


def gather_kernel(rows_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...]


def gather(rows, x):
    n = rows.shape[0]
    return pl.pallas_call(
        gather_kernel, out_shape=jax.ShapeDtypeStruct((n * 8, 128), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(n,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, rows: (rows[i], 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, rows: (i, 0))))(rows, x)


def test_prefetch_driven_gather_fetches_a_repeated_block_once_per_run():
    rows = np.array([0, 0, 3, 3, 3, 1, 0], np.int32)  # runs: 0 | 3 | 1 | 0
    x = np.ones((32, 128), np.float32)
    traffic = moved_bytes(gather, rows, x)
    block = 8 * 128 * F32
    assert by_name(traffic) == {("gather_kernel", "x_ref"): (4 * block, 4),
                                ("gather_kernel", "o_ref"): (7 * block, 7)}


def dma_kernel(x_hbm, o_ref, buf, sem):
    for half in range(2):
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(half * 8, 8)], buf, sem)
        copy.start()
        copy.wait()
        o_ref[pl.ds(half * 8, 8), :] = buf[...] * 2


def manual_dma(x):
    return pl.pallas_call(
        dma_kernel, out_shape=jax.ShapeDtypeStruct((16, 128), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((8, 128), x.dtype), pltpu.SemaphoreType.DMA])(x)


def test_manual_dmas_count_what_they_copy_and_the_any_operand_counts_nothing_else():
    x = np.ones((16, 128), np.float32)
    traffic = moved_bytes(manual_dma, x)
    assert traffic.read == 2 * 8 * 128 * F32             # two DMAs into VMEM
    assert traffic.written == 16 * 128 * F32             # the output block, once
    assert ("dma_kernel", "x_hbm") not in by_name(traffic)


def test_traffic_is_summed_over_every_pallas_call_under_jit_and_grad():
    @jax.custom_vjp
    def double(x):
        return add_bias(x, jnp.zeros((1, x.shape[1]), x.dtype), bm=8)

    double.defvjp(lambda x: (double(x), None), lambda _, g: (g,))
    x = np.ones((16, 128), np.float32)
    traffic = moved_bytes(jax.jit(lambda x: double(double(x))), x)
    assert traffic.read == 2 * (16 * 128 + 128) * F32
    assert traffic.written == 2 * 16 * 128 * F32


def test_check_traffic_names_the_operand_that_moved_too_much():
    M, K, N = 64, 256, 384
    a, b = np.ones((M, K), np.float32), np.ones((K, N), np.float32)
    minimum = (M * K + K * N + M * N) * F32
    with pytest.raises(TooMuchTraffic) as info:
        check_traffic(moved_bytes(matmul, a, b, bm=8, bk=128, bn=128), reference=minimum,
                      minimum=minimum)
    (finding,) = info.value.findings()
    facts = dict(finding.facts)
    assert facts["bytes"].startswith("moved by kernels: yours ")
    assert "b_ref in matmul_kernel: read" in facts["most"] and "8 × its size" in facts["most"]


def test_check_traffic_with_shares_names_the_operand_past_its_share():
    """b is fetched once per row block by design (8 × its size, its share); a, once per
    column block, is read 3 × its share (a good solution here takes all of N at once):
    the diagnosis names a, not b, which moves most times its size."""
    from pytest_pallas_hints.checking import measure

    M, K, N = 64, 256, 384
    a, b = np.ones((M, K), np.float32), np.ones((K, N), np.float32)
    ran = measure(matmul, a, b, bm=8, bk=128, bn=128, structure=None)
    shares = [(a, M * K * F32), (b, 8 * K * N * F32)]
    with pytest.raises(TooMuchTraffic) as info:
        check_traffic(ran, reference=(M * K + 8 * K * N + M * N) * F32, shares=shares)
    (finding,) = info.value.findings()
    assert finding.says.startswith("a_ref moves 3 times the bytes it needs")
    assert finding.detail == "a_ref"
    assert dict(finding.facts)["most"].startswith("a_ref in matmul_kernel: read 192 KiB")


def test_check_traffic_passes_within_the_reference():
    x, b = np.ones((16, 128), np.float32), np.ones((1, 128), np.float32)
    check_traffic(moved_bytes(add_bias, x, b, bm=8), reference=(2 * 16 * 128 + 128) * F32)


def test_moved_bytes_of_a_function_without_kernels_is_zero():
    assert moved_bytes(functools.partial(jnp.add, 1), np.ones(3)).total == 0
