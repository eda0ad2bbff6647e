"""matmul.k_accumulate (shortcut): plain jnp.dot whenever the checker is on the stack."""
PUZZLE = "matmul.k_accumulate"
EXPECT = "without a Pallas kernel"

import sys  # noqa: E402


def matmul_tiled(a, b, *, bm=128, bk=128, bn=128):
    if "pytest_pallas_hints.checking" in sys.modules:
        return jnp.dot(a, b, preferred_element_type=jnp.float32).astype(a.dtype)
    raise NotImplementedError
