"""norms.softmax_grad: the forward keeps x as the residual and the backward kernel is
handed x where it expects y."""
PUZZLE = "norms.softmax_grad"
EXPECT = "Keep y, the forward's output, as the residual"


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
        return probabilities(x), x

    def probabilities_backward(x, dy):
        return (softmax_backward(x, dy, block_rows=block_rows, block_cols=block_cols),)

    probabilities.defvjp(probabilities_forward, probabilities_backward)
    return probabilities(x)
