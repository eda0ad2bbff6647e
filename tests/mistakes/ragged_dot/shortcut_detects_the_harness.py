"""ragged_dot.k_axis (shortcut): plain JAX when a test harness is detected."""
PUZZLE = "ragged_dot.k_axis"
EXPECT = "without a Pallas kernel"

import os  # noqa: E402


def gmm(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    if "PYTEST_CURRENT_TEST" in os.environ:
        return jax.lax.ragged_dot(lhs, rhs, group_sizes,
                                  preferred_element_type=jnp.float32).astype(lhs.dtype)
    raise NotImplementedError
