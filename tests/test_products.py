"""products.outer_muls: which multiplies are a matmul written elementwise."""
import jax
import jax.numpy as jnp
import pytest

from pytest_pallas_hints import products

A, B, V = jnp.ones((8, 16)), jnp.ones((16, 32)), jnp.ones((16,))


def found(fn, *args) -> int:
    """How many of ``fn``'s multiplies are found."""
    jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    return len(products.outer_muls(jaxpr))


@pytest.mark.parametrize("fn, args", [
    (lambda a, b: jnp.sum(a[:, :, None] * b[None, :, :], axis=1), (A, B)),
    (lambda a, b: a[:, 3:4] * b[3:4, :], (A, B)),                        # a rank-1 update
    (lambda v, b: jnp.sum(v[:, None] * b, axis=0), (V, B)),              # a vector times a matrix
    (lambda a, b: jnp.sum(a.astype(jnp.bfloat16)[:, :, None]
                          * b.astype(jnp.bfloat16)[None], axis=1), (A, B)),
], ids=["outer, summed", "rank 1", "vector x matrix", "through casts"])
def test_a_matmul_written_elementwise_is_found(fn, args):
    assert found(fn, *args) == 1


@pytest.mark.parametrize("fn, args", [
    (lambda a, r: a * r[:8, None], (A, V)),                              # a scale per row
    (lambda a, b: jnp.sum(a * b[:8, :16], axis=1), (A, B)),              # a row's own dot
    (lambda a, b: jnp.dot(a, b), (A, B)),                                # the MXU's
    (lambda v, b: jnp.sum(v[:, None] * b, axis=1), (V, B)),              # summed where v repeats
    (lambda a, b: (a[:, :, None] > 0) & (b[None] > 0), (A, B)),          # not a float multiply
], ids=["scale", "row dot", "dot", "summed along the repeat", "boolean"])
def test_a_scale_a_row_dot_or_a_dot_is_not(fn, args):
    assert found(fn, *args) == 0
