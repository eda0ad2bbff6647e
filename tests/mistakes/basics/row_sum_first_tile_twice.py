"""basics.row_sum: the j == 0 step stores its tile's sum, then the += after it adds it again."""
PUZZLE = "basics.row_sum"
EXPECT = "count the first column tile twice"

def row_sum_kernel(x_ref, o_ref):
    @pl.when(pl.program_id(1) == 0)
    def start_row():
        o_ref[...] = jnp.sum(x_ref[...], axis=1, keepdims=True)
    o_ref[...] += jnp.sum(x_ref[...], axis=1, keepdims=True)

