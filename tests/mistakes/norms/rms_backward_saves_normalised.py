"""norms.rms_backward: the forward rule keeps the normalised rows x * (1 / rms) beside x,
scale and 1 / rms: an [R, D] array more, written and read back for nothing (the
backward recomputes it)."""
PUZZLE = "norms.rms_backward"
EXPECT = "saves 2 arrays as large as the input for the backward, where the puzzle's saves 1"


def rms_norm(x, scale, *, eps=1e-6, block_rows=16):
    if x.ndim != 2 or scale.shape != x.shape[1:]:
        raise ValueError(f"rms_norm: x must be [R, D] and scale [D]; got shapes {x.shape} "
                         f"and {scale.shape}")
    _check_block("rms_norm", "block_rows", block_rows, 8)
    block_rows = min(block_rows, len(x))

    @jax.custom_vjp
    def normalise(x, scale):
        return rms_norm_forward(x, scale, eps=eps, block_rows=block_rows)[0]

    def normalise_forward(x, scale):
        y, inv_rms = rms_norm_forward(x, scale, eps=eps, block_rows=block_rows)
        return y, (x, scale, inv_rms, x * inv_rms)

    def normalise_backward(residuals, dy):
        x, scale, inv_rms, _ = residuals
        return rms_norm_backward(x, scale, inv_rms, dy, block_rows=block_rows)

    normalise.defvjp(normalise_forward, normalise_backward)
    return normalise(x, scale)
