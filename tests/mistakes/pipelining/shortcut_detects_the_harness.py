"""pipelining.gather (shortcut): plain jnp.take whenever the checker is loaded."""
PUZZLE = "pipelining.gather"
EXPECT = "without a Pallas kernel"

import sys  # noqa: E402


def gather_rows(table, ids, *, rows_per_step=8):
    if "pytest_pallas_hints.checking" in sys.modules:
        return jnp.take(table, ids, axis=0)
    raise NotImplementedError
