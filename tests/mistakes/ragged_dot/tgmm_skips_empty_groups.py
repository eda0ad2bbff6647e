"""ragged_dot.tgmm: gmm's metadata (no visit for an empty group): an empty group's
output block is never written."""
PUZZLE = "ragged_dot.tgmm"
EXPECT = "no visit wrote the experts of the empty groups"

_make_group_metadata = make_group_metadata


def make_group_metadata(group_sizes, m, tm, *, visit_empty_groups=False):
    return _make_group_metadata(group_sizes, m, tm)
