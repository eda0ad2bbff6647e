"""norms.rms_forward (shortcut): a kernel copies x; the normalisation runs in jnp."""
PUZZLE = "norms.rms_forward"
EXPECT = "happens in plain JAX around your kernel"


def rms_norm_forward(x, scale, *, eps=1e-6, block_rows=8):
    def copy_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    x = pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    xf = x.astype(jnp.float32)
    inv_rms = jax.lax.rsqrt(jnp.mean(xf * xf, axis=1, keepdims=True) + eps)
    return (xf * inv_rms * scale.astype(jnp.float32)).astype(x.dtype), inv_rms
