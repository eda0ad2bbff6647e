"""basics.add_one: assigns to the name o_ref instead of storing into the buffer."""
PUZZLE = "basics.add_one"
EXPECT = "store into o_ref[...]"


def add_one_kernel(x_ref, o_ref):
    o_ref = x_ref[...] + 1  # noqa: F841  rebinds the local name; nothing is stored
