"""collectives.device_ids: the right neighbour is me + 1, not wrapped round the ring."""
PUZZLE = "collectives.device_ids"
EXPECT = "the last device's right neighbour came out as N"
AVOID = "diagonal"


def neighbours(axis_name):
    me = lax.axis_index(axis_name)
    n = lax.axis_size(axis_name)
    return lax.rem(me + n - 1, n), me + 1   # + n: no negative ids


