"""basics.outer_relu_grad: dx ignores the ReLU's mask."""
PUZZLE = "basics.outer_relu_grad"
EXPECT = "ignores the ReLU"


def outer_relu_dx_kernel(x_ref, y_ref, g_ref, dx_ref):
    @pl.when(pl.program_id(1) == 0)
    def start_row():
        dx_ref[...] = jnp.zeros_like(dx_ref)

    dx_ref[...] += jnp.sum(g_ref[...] * y_ref[...], axis=1, keepdims=True)
