"""norms.rms_backward: the tail rows are masked, but the dscale scratch is never zeroed:
the first += reads garbage. Not a tail problem, though the configuration has a tail."""
PUZZLE = "norms.rms_backward"
EXPECT = "the kit saw a scratch read before anything wrote it"
AVOID = "Mask them"


def rms_norm_backward_kernel(x_ref, scale_ref, inv_rms_ref, dy_ref, dx_ref, dscale_ref,
                             dscale_scratch, *, R):
    i = pl.program_id(0)
    inv_rms = inv_rms_ref[...]
    x_hat = x_ref[...].astype(jnp.float32) * inv_rms
    dy = dy_ref[...].astype(jnp.float32)
    g = dy * scale_ref[...].astype(jnp.float32)
    dx = inv_rms * (g - x_hat * jnp.mean(g * x_hat, axis=1, keepdims=True))
    dx_ref[...] = dx.astype(dx_ref.dtype)
    row = i * x_ref.shape[0] + jax.lax.broadcasted_iota(jnp.int32, (x_ref.shape[0], 1), 0)
    dscale_scratch[...] += jnp.sum(jnp.where(row < R, dy * x_hat, 0.0), axis=0, keepdims=True)

    @pl.when(i == pl.num_programs(0) - 1)
    def finish():
        dscale_ref[...] = dscale_scratch[...].astype(dscale_ref.dtype)
