"""ragged_dot.k_axis (shortcut): a real kernel runs on a dummy input; the result comes from
jax.lax.ragged_dot."""
PUZZLE = "ragged_dot.k_axis"
EXPECT = "is never used"

_gmm = gmm


def gmm(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    E, K, N = rhs.shape
    _gmm(jnp.zeros((8, K), lhs.dtype), rhs, jnp.zeros((E,), jnp.int32).at[0].set(8),
         tiling=tiling)
    return jax.lax.ragged_dot(lhs, rhs, group_sizes, preferred_element_type=jnp.float32) \
        .astype(lhs.dtype)
