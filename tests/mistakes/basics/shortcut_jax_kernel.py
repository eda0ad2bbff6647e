"""basics.add_one (shortcut): JAX's own example kernel (it doubles) does the work."""
PUZZLE = "basics.add_one"
EXPECT = "is not yours"

from jax.experimental.pallas.ops.tpu import example_kernel  # noqa: E402


def add_one(x):
    return example_kernel.double((x + 1) * 0.5)
