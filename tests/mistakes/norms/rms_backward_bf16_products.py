"""norms.rms_backward: dscale is summed in a float32 scratch, but the rows are never cast:
x_hat, g and dy * x_hat are bf16, so every row block's share of dscale is rounded before
the float32 sum sees it (and dx is computed in bf16 too)."""
PUZZLE = "norms.rms_backward"
EXPECT = "dscale_scratch is float32, but its update is computed in bfloat16"


def rms_norm_backward_kernel(x_ref, scale_ref, inv_rms_ref, dy_ref, dx_ref, dscale_ref,
                             dscale_scratch, *, R):
    i = pl.program_id(0)
    block_rows = x_ref.shape[0]

    @pl.when(i == 0)
    def start():
        dscale_scratch[...] = jnp.zeros_like(dscale_scratch)

    x, dy = x_ref[...], dy_ref[...]                     # bf16 for bf16 rows
    inv_rms = inv_rms_ref[...].astype(x.dtype)
    x_hat = x * inv_rms
    g = dy * scale_ref[...]
    dx = inv_rms * (g - x_hat * jnp.mean(g * x_hat, axis=1, keepdims=True))
    dx_ref[...] = dx.astype(dx_ref.dtype)
    row = i * block_rows + jax.lax.broadcasted_iota(jnp.int32, (block_rows, 1), 0)
    dscale_scratch[...] += jnp.sum(jnp.where(row < R, dy * x_hat, 0), axis=0,
                                   keepdims=True).astype(jnp.float32)

    @pl.when(i == pl.num_programs(0) - 1)
    def finish():
        dscale_ref[...] = dscale_scratch[...].astype(dscale_ref.dtype)
