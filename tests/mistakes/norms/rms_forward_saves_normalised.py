"""norms.rms_forward: the forward saves the normalised rows x / rms for the backward,
an [R, D] array, instead of 1 / rms per row."""
PUZZLE = "norms.rms_forward"
EXPECT = "Save 1 / rms instead, one float32 per row"


def rms_norm_forward_kernel(x_ref, scale_ref, y_ref, x_hat_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    x_hat = x * jax.lax.rsqrt(jnp.mean(x * x, axis=1, keepdims=True) + eps)
    y_ref[...] = (x_hat * scale_ref[...].astype(jnp.float32)).astype(y_ref.dtype)
    x_hat_ref[...] = x_hat


def rms_norm_forward(x, scale, *, eps=1e-6, block_rows=8):
    R, D = x.shape
    rows = pl.BlockSpec((block_rows, D), lambda i: (i, 0))
    return pl.pallas_call(
        functools.partial(rms_norm_forward_kernel, eps=eps),
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype),
                   jax.ShapeDtypeStruct((R, D), jnp.float32)],
        grid=(pl.cdiv(R, block_rows),),
        in_specs=[rows, pl.BlockSpec((1, D), lambda i: (0, 0))],
        out_specs=[rows, rows],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, scale.reshape(1, D))
