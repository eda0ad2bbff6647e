"""norms.layer_norm: dx adds the mean of g instead of subtracting it: a few percent off,
in float32. Not a rounding. Where the error stays under 5% of the largest value, the
diagnosis says no bf16 rounded it; above, dx's own words show (inputs decide which)."""
PUZZLE = "norms.layer_norm"
EXPECT = ("your program holds no bfloat16 value: nothing was rounded to bf16",
          "dx is wrong: dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat))")
AVOID = "look like bf16 rounding"


def layer_norm_backward_kernel(x_ref, scale_ref, mean_ref, rstd_ref, dy_ref, dx_ref,
                               dscale_ref, dbias_ref, dscale_scratch, dbias_scratch, *, R):
    i = pl.program_id(0)
    block_rows = x_ref.shape[0]

    @pl.when(i == 0)
    def start():
        dscale_scratch[...] = jnp.zeros_like(dscale_scratch)
        dbias_scratch[...] = jnp.zeros_like(dbias_scratch)

    rstd = rstd_ref[...]
    x_hat = (x_ref[...].astype(jnp.float32) - mean_ref[...]) * rstd
    dy = dy_ref[...].astype(jnp.float32)
    g = dy * scale_ref[...].astype(jnp.float32)
    dx = rstd * (g + jnp.mean(g, axis=1, keepdims=True)
                 - x_hat * jnp.mean(g * x_hat, axis=1, keepdims=True))
    dx_ref[...] = dx.astype(dx_ref.dtype)
    row = i * block_rows + jax.lax.broadcasted_iota(jnp.int32, (block_rows, 1), 0)
    real = row < R
    dscale_scratch[...] += jnp.sum(jnp.where(real, dy * x_hat, 0.0), axis=0, keepdims=True)
    dbias_scratch[...] += jnp.sum(jnp.where(real, dy, 0.0), axis=0, keepdims=True)

    @pl.when(i == pl.num_programs(0) - 1)
    def finish():
        dscale_ref[...] = dscale_scratch[...].astype(dscale_ref.dtype)
        dbias_ref[...] = dbias_scratch[...].astype(dbias_ref.dtype)
