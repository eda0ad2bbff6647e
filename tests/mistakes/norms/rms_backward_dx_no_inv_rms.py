"""norms.rms_backward: dx is not multiplied by the row's 1 / rms."""
PUZZLE = "norms.rms_backward"
EXPECT = "Is dx multiplied by the row's 1 / rms"


def rms_norm_backward_kernel(x_ref, scale_ref, inv_rms_ref, dy_ref, dx_ref, dscale_ref,
                             dscale_scratch, *, R):
    i = pl.program_id(0)
    block_rows = x_ref.shape[0]

    @pl.when(i == 0)
    def start():
        dscale_scratch[...] = jnp.zeros_like(dscale_scratch)

    inv_rms = inv_rms_ref[...]
    x_hat = x_ref[...].astype(jnp.float32) * inv_rms          # recomputed, never stored
    dy = dy_ref[...].astype(jnp.float32)
    g = dy * scale_ref[...].astype(jnp.float32)
    dx = (g - x_hat * jnp.mean(g * x_hat, axis=1, keepdims=True))
    dx_ref[...] = dx.astype(dx_ref.dtype)
    # Rows past R in the last block are garbage, and dscale sums over rows: drop them.
    row = i * block_rows + jax.lax.broadcasted_iota(jnp.int32, (block_rows, 1), 0)
    dscale_scratch[...] += jnp.sum(jnp.where(row < R, dy * x_hat, 0.0), axis=0,
                                   keepdims=True)

    @pl.when(i == pl.num_programs(0) - 1)
    def finish():
        dscale_ref[...] = dscale_scratch[...].astype(dscale_ref.dtype)
