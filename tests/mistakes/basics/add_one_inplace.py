"""kernel does o_ref[...] += 1 (as if o_ref aliased x); should say x_ref is never read / output uninitialised."""
PUZZLE = "basics.add_one"
EXPECT = 'computed from the output itself'


def add_one_kernel(x_ref, o_ref):
    o_ref[...] += 1
