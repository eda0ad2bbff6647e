"""collectives.device_ids: the left neighbour as a plain remainder of me - 1: on device 0
lax.rem(-1, N) is -1, not N - 1."""
PUZZLE = "collectives.device_ids"
EXPECT = "device 0's left neighbour came out as -1"


def neighbours(axis_name):
    me = lax.axis_index(axis_name)
    n = lax.axis_size(axis_name)
    return lax.rem(me - 1, n), lax.rem(me + 1, n)
