"""norms.rms_backward: the garbage rows past R in the last block go into dscale."""
PUZZLE = "norms.rms_backward"
EXPECT = "its rows past R are garbage (NaN in interpret mode). Did they go into the sum?"


def rms_norm_backward_kernel(x_ref, scale_ref, inv_rms_ref, dy_ref, dx_ref, dscale_ref,
                             dscale_scratch, *, R):
    i = pl.program_id(0)

    @pl.when(i == 0)
    def start():
        dscale_scratch[...] = jnp.zeros_like(dscale_scratch)

    inv_rms = inv_rms_ref[...]
    x_hat = x_ref[...].astype(jnp.float32) * inv_rms
    dy = dy_ref[...].astype(jnp.float32)
    g = dy * scale_ref[...].astype(jnp.float32)
    dx = inv_rms * (g - x_hat * jnp.mean(g * x_hat, axis=1, keepdims=True))
    dx_ref[...] = dx.astype(dx_ref.dtype)
    dscale_scratch[...] += jnp.sum(dy * x_hat, axis=0, keepdims=True)

    @pl.when(i == pl.num_programs(0) - 1)
    def finish():
        dscale_ref[...] = dscale_scratch[...].astype(dscale_ref.dtype)
