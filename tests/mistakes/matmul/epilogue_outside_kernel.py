"""matmul.epilogue: bias and GELU applied by JAX after the kernel, not fused into it."""
PUZZLE = "matmul.epilogue"
EXPECT = "move both into the kernel's last k step"


def matmul_bias_gelu(a, b, bias, *, bm=128, bk=128, bn=128):
    return jax.nn.gelu(matmul_tiled(a, b, bm=bm, bk=bk, bn=bn) + bias)
