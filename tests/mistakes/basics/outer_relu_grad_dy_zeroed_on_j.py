"""basics.outer_relu_grad: the dy kernel zeroes under program_id(0), which is j in its
(j, i) grid, not the reduced axis i."""
PUZZLE = "basics.outer_relu_grad"
EXPECT = "so i is pl.program_id(1)"


def outer_relu_dy_kernel(x_ref, y_ref, g_ref, dy_ref):
    @pl.when(pl.program_id(0) == 0)
    def start_column():
        dy_ref[...] = jnp.zeros_like(dy_ref)

    x, y = x_ref[...], y_ref[...]
    g = jnp.where(x * y > 0, g_ref[...], 0)
    dy_ref[...] += jnp.sum(g * x, axis=0, keepdims=True)
