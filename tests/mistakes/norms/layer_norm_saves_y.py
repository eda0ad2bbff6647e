"""norms.layer_norm: the forward rule keeps y beside x, scale, the mean and 1 / std: an
[R, D] array more, written and read back, that the backward never needs."""
PUZZLE = "norms.layer_norm"
EXPECT = "saves 2 arrays as large as the input for the backward"


def layer_norm(x, scale, bias, *, eps=1e-5, block_rows=16):
    if x.ndim != 2 or scale.shape != x.shape[1:] or bias.shape != x.shape[1:]:
        raise ValueError(f"layer_norm: x must be [R, D], scale and bias [D]; got shapes "
                         f"{x.shape}, {scale.shape} and {bias.shape}")
    _check_block("layer_norm", "block_rows", block_rows, 8)
    block_rows = min(block_rows, len(x))

    @jax.custom_vjp
    def normalise(x, scale, bias):
        return layer_norm_forward(x, scale, bias, eps=eps, block_rows=block_rows)[0]

    def normalise_forward(x, scale, bias):
        y, mean, rstd = layer_norm_forward(x, scale, bias, eps=eps, block_rows=block_rows)
        return y, (x, scale, mean, rstd, y)

    def normalise_backward(residuals, dy):
        x, scale, mean, rstd, _ = residuals
        return layer_norm_backward(x, scale, mean, rstd, dy, block_rows=block_rows)

    normalise.defvjp(normalise_forward, normalise_backward)
    return normalise(x, scale, bias)
