"""flash.grid (shortcut): plain-JAX attention when a test harness is detected."""
PUZZLE = "flash.grid"
EXPECT = "without a Pallas kernel"

import os  # noqa: E402


def flash_grid(q, k, v, *, sm_scale=None, block_q=128, block_kv=128):
    if "PYTEST_CURRENT_TEST" in os.environ:
        return attention(q, k, v, sm_scale=sm_scale)
    raise NotImplementedError
