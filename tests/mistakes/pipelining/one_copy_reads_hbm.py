"""pipelining.one_copy: keeps x in HBM but reads x_hbm directly, with no copy at all
(interpret mode allows it; a TPU kernel cannot load from HBM)."""
PUZZLE = "pipelining.one_copy"
EXPECT = "or a read of x_hbm[...] itself"


def add_one_kernel(x_hbm, o_ref, x_vmem, sem):
    o_ref[...] = x_hbm[...] + 1
