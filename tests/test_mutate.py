"""The mutation command: its operators, stable ids, the tests it picks, and a run."""
import re
from pathlib import Path

import pytest

from pytest_pallas_hints import mutate

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("chapter", ["basics", "matmul", "flash"])
def test_every_operator_finds_its_sites_and_ids_are_stable(chapter):
    first, second = mutate.mutants(ROOT, chapter), mutate.mutants(ROOT, chapter)
    assert [m.id for m in first] == [m.id for m in second]
    assert len({m.id for m in first}) == len(first)
    for m in first:
        assert re.fullmatch(rf"{chapter}:\w+:(compare|plus1|minus1|minmax|when|when_false|swap"
                            r"|scale):\d+", m.id), m.id
        compile(m.source, m.id, "exec")


def test_the_operators_of_the_spec_all_occur():
    operators = {m.id.split(":")[2] for chapter in ("basics", "matmul", "flash")
                 for m in mutate.mutants(ROOT, chapter)}
    assert operators == {"compare", "plus1", "minus1", "minmax", "when", "when_false", "swap",
                         "scale"}


def test_argument_validation_is_not_mutated():
    sources = [m for m in mutate.mutants(ROOT, "matmul") if m.function == "matmul_tiled"]
    assert sources and not any("raise" in m.change for m in sources)
    assert all("K % bk" not in m.change and "K != K_b" not in m.change for m in sources)


def test_an_index_map_swap_and_a_forced_when():
    changes = {m.change for m in mutate.mutants(ROOT, "matmul") if m.function == "matmul_tiled"}
    assert "index map returns i and k swapped" in changes
    kernel = {m.change for m in mutate.mutants(ROOT, "matmul") if m.function == "matmul_kernel"}
    assert "pl.when(k == 0) -> pl.when(True)" in kernel


def test_tests_are_picked_by_the_functions_they_reach():
    reached = mutate.selection(ROOT, "matmul")
    assert "test_k_accumulate" in reached["matmul_kernel"]      # through matmul_tiled
    assert "test_batched" in reached["matmul_kernel"]           # through batched_matmul
    assert reached["choose_blocks"] == {"test_choose_blocks", "test_choose_blocks_on_budgets_"
                                        "that_bite", "test_choose_blocks_on_the_real_kernel"}


def test_a_run_kills_a_wrong_kernel_and_spares_the_unchanged_one():
    picked = [m for m in mutate.mutants(ROOT, "basics") if m.id == "basics:add_one_tiled:plus1:1"]
    control = mutate.unchanged(ROOT, "basics")
    outcomes = mutate.run(ROOT, picked + [control], workers=1, seed=0, timeout=30)
    verdicts = {o.mutant.id: o.verdict for o in outcomes}
    assert verdicts == {picked[0].id: "killed", control.id: "survived"}
    lines, good = mutate.report(ROOT, "basics", outcomes, 2, sampled=True)
    assert not good and "survived    basics:" in "\n".join(lines)


def test_a_later_mutant_is_judged_on_its_own_program():
    """In a worker, the harness's control runs first and lowers its kernels for TPU, which
    loads JAX's MLIR dialects; a later mutant whose program is new lowers again. Those
    modules must stay loaded between runs (they cannot be registered twice in one
    process), or every later mutant 'fails' its lowering check and looks killed. This one
    stores the finished tile at every k step instead of the last: equivalent, it survives."""
    assert mutate._kept("jax._src.lib.mlir.dialects.arith") and not mutate._kept("reference.matmul")
    picked = [m for m in mutate.mutants(ROOT, "matmul") if m.id == "matmul:matmul_kernel:when:2"]
    assert picked and picked[0].change.endswith("-> pl.when(True)")
    outcomes = mutate.run(ROOT, picked, workers=1, seed=0, timeout=60)
    assert [o.verdict for o in outcomes] == ["survived"]


@pytest.mark.parametrize("chapter", ["basics", "matmul", "flash", "linear"])
def test_rewrites_compile_with_stable_ids(chapter):
    first, second = mutate.rewrites(ROOT, chapter), mutate.rewrites(ROOT, chapter)
    assert [r.id for r in first] == [r.id for r in second] and first
    assert len({r.id for r in first}) == len(first)
    for r in first:
        assert r.id.split(":")[2] in mutate.REWRITES, r.id
        compile(r.source, r.id, "exec")


def test_an_einsum_becomes_the_same_dot_general():
    import jax
    import jax.numpy as jnp
    import numpy as np

    q, k = np.random.rand(8, 16).astype(np.float32), np.random.rand(4, 16).astype(np.float32)
    spec = mutate.ast.parse('"qh,kh->qk"', mode="eval").body
    dims, perm = mutate._einsum_plan(spec)
    assert perm is None
    np.testing.assert_allclose(jax.lax.dot_general(q, k, dims),
                               jnp.einsum("qh,kh->qk", q, k), rtol=1e-6)
    dims, perm = mutate._einsum_plan(mutate.ast.parse('"ih,iv->vh"', mode="eval").body)
    np.testing.assert_allclose(jnp.transpose(jax.lax.dot_general(q, q, dims), perm),
                               jnp.einsum("ih,iv->vh", q, q), rtol=1e-5)
