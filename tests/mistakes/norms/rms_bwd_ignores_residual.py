"""RMSNorm backward reads the saved 1/rms (so the bytes match) but multiplies it by 0
and recomputes 1/rms from x (it ignores the residual the forward saved). Dodges 'the
forward saves one float per row, all the backward needs besides x'."""
PUZZLE = "norms.rms_backward"
EXPECT = "your backward does not use the"


def rms_norm_backward_kernel(x_ref, scale_ref, inv_rms_ref, dy_ref, dx_ref, dscale_ref,
                             dscale_scratch, *, R):
    i = pl.program_id(0)
    block_rows = x_ref.shape[0]

    @pl.when(i == 0)
    def start():
        dscale_scratch[...] = jnp.zeros_like(dscale_scratch)

    x = x_ref[...].astype(jnp.float32)
    inv_rms = jax.lax.rsqrt(jnp.mean(x * x, axis=1, keepdims=True) + 1e-6) + 0.0 * inv_rms_ref[...]
    x_hat = x * inv_rms
    dy = dy_ref[...].astype(jnp.float32)
    g = dy * scale_ref[...].astype(jnp.float32)
    dx = inv_rms * (g - x_hat * jnp.mean(g * x_hat, axis=1, keepdims=True))
    dx_ref[...] = dx.astype(dx_ref.dtype)
    row = i * block_rows + jax.lax.broadcasted_iota(jnp.int32, (block_rows, 1), 0)
    dscale_scratch[...] += jnp.sum(jnp.where(row < R, dy * x_hat, 0.0), axis=0,
                                   keepdims=True)

    @pl.when(i == pl.num_programs(0) - 1)
    def finish():
        dscale_ref[...] = dscale_scratch[...].astype(dscale_ref.dtype)
