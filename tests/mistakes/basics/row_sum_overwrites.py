"""basics.row_sum: stores each tile's sum instead of adding it: only the last tile counts."""
PUZZLE = "basics.row_sum"
EXPECT = "only the last column tile is summed"


def row_sum_kernel(x_ref, o_ref):
    @pl.when(pl.program_id(1) == 0)
    def start_row():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] = jnp.sum(x_ref[...], axis=1, keepdims=True)
