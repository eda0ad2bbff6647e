"""basics.outer_relu_grad: the ReLU mask keeps x * y >= 0, letting the gradient through at 0."""
PUZZLE = "basics.outer_relu_grad"
EXPECT = "the mask is x * y > 0, strictly"

def outer_relu_dx_kernel(x_ref, y_ref, g_ref, dx_ref):
    @pl.when(pl.program_id(1) == 0)
    def start_row():
        dx_ref[...] = jnp.zeros_like(dx_ref)
    x, y = x_ref[...], y_ref[...]
    g = jnp.where(x * y >= 0, g_ref[...], 0)
    dx_ref[...] += jnp.sum(g * y, axis=1, keepdims=True)

