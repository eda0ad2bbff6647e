"""norms.softmax_grad: block_rows never shrinks to R: 12 rows go through a block of 16,
a third of it garbage, in VMEM and in every step's work."""
PUZZLE = "norms.softmax_grad"
EXPECT = "the puzzle's are (12, 640)"


def softmax(x, *, block_rows=16, block_cols=None):
    if x.ndim != 2 or not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"softmax: x must be a 2-D floating array [R, C]; got shape "
                         f"{x.shape} and dtype {x.dtype}")
    _check_block("softmax", "block_rows", block_rows, 8)
    if block_cols is not None:
        _check_block("softmax", "block_cols", block_cols, 128)

    @jax.custom_vjp
    def probabilities(x):
        if block_cols is None:
            return softmax_rows(x, block_rows=block_rows)
        return softmax_long(x, block_rows=block_rows, block_cols=block_cols)

    def probabilities_forward(x):
        y = probabilities(x)
        return y, y

    def probabilities_backward(y, dy):
        return (softmax_backward(y, dy, block_rows=block_rows, block_cols=block_cols),)

    probabilities.defvjp(probabilities_forward, probabilities_backward)
    return probabilities(x)
