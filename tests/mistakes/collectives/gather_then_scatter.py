"""collectives.all_reduce: all-gather first, then reduce-scatter: each device ends with N
times its own x."""
PUZZLE = "collectives.all_reduce"
EXPECT = "you gathered first and then reduce-scattered"


def all_reduce(x, *, axis_name):
    return reduce_scatter(all_gather(x, axis_name=axis_name), axis_name=axis_name)
