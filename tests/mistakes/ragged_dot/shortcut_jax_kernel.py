"""ragged_dot.k_axis (shortcut): JAX's own megablox gmm stands in, on lhs padded to the
multiple of tm it needs."""
PUZZLE = "ragged_dot.k_axis"
EXPECT = "is not yours"

from jax.experimental.pallas.ops.tpu.megablox import gmm as megablox_gmm  # noqa: E402


def gmm(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    M = lhs.shape[0]
    tm = tiling[0]
    padded = -(-M // tm) * tm
    lhs = jnp.pad(lhs, ((0, padded - M), (0, 0)))
    group_sizes = group_sizes.at[-1].add(padded - M)
    return megablox_gmm(lhs, rhs, group_sizes, lhs.dtype, tuple(tiling))[:M]
