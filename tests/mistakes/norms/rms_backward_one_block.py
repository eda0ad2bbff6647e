"""norms.rms_backward: dscale is each block's own sum, stored at every step: only the
last row block's share reaches the output."""
PUZZLE = "norms.rms_backward"
EXPECT = "Zero dscale_scratch only at the first step"


def rms_norm_backward_kernel(x_ref, scale_ref, inv_rms_ref, dy_ref, dx_ref, dscale_ref,
                             dscale_scratch, *, R):
    i = pl.program_id(0)
    block_rows = x_ref.shape[0]
    inv_rms = inv_rms_ref[...]
    x_hat = x_ref[...].astype(jnp.float32) * inv_rms
    dy = dy_ref[...].astype(jnp.float32)
    g = dy * scale_ref[...].astype(jnp.float32)
    dx = inv_rms * (g - x_hat * jnp.mean(g * x_hat, axis=1, keepdims=True))
    dx_ref[...] = dx.astype(dx_ref.dtype)
    row = i * block_rows + jax.lax.broadcasted_iota(jnp.int32, (block_rows, 1), 0)
    dscale_ref[...] = jnp.sum(jnp.where(row < R, dy * x_hat, 0.0), axis=0,
                              keepdims=True).astype(dscale_ref.dtype)
