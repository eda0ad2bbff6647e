"""basics.row_sum: accumulates into o_ref without zeroing it at the first step."""
PUZZLE = "basics.row_sum"
EXPECT = "Zero o_ref at the first j step"


def row_sum_kernel(x_ref, o_ref):
    o_ref[...] += jnp.sum(x_ref[...], axis=1, keepdims=True)
