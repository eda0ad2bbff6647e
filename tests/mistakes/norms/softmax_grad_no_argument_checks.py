"""norms.softmax_grad: softmax checks nothing: a 3-D x fails inside, with a ValueError
about unpacking that names no argument."""
PUZZLE = "norms.softmax_grad"
EXPECT = "raised a ValueError that does not name x"


def softmax(x, *, block_rows=16, block_cols=None):
    R, C = x.shape
    block_rows = min(block_rows, R)
    block_cols = None if block_cols is None else min(block_cols, C)

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
