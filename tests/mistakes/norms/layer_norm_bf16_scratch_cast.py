"""norms.layer_norm: the bf16 scratches of the mistake above, with each update cast to
bf16 to fit (what "cast it first" would have led to): the sums are carried in bf16."""
PUZZLE = "norms.layer_norm"
EXPECT = "dscale or dbias is summed in bfloat16"


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
    dx = rstd * (g - jnp.mean(g, axis=1, keepdims=True)
                 - x_hat * jnp.mean(g * x_hat, axis=1, keepdims=True))
    dx_ref[...] = dx.astype(dx_ref.dtype)
    row = i * block_rows + jax.lax.broadcasted_iota(jnp.int32, (block_rows, 1), 0)
    real = row < R
    dscale_scratch[...] += jnp.sum(jnp.where(real, dy * x_hat, 0.0), axis=0, keepdims=True).astype(dscale_scratch.dtype)
    dbias_scratch[...] += jnp.sum(jnp.where(real, dy, 0.0), axis=0, keepdims=True).astype(dscale_scratch.dtype)

    @pl.when(i == pl.num_programs(0) - 1)
    def finish():
        dscale_ref[...] = dscale_scratch[...].astype(dscale_ref.dtype)
        dbias_ref[...] = dbias_scratch[...].astype(dbias_ref.dtype)


def layer_norm_backward(x, scale, mean, rstd, dy, *, block_rows=8):
    R, D = x.shape
    rows = pl.BlockSpec((block_rows, D), lambda i: (i, 0))
    whole = pl.BlockSpec((1, D), lambda i: (0, 0))
    per_row = pl.BlockSpec((block_rows, 1), lambda i: (i, 0))
    dx, dscale, dbias = pl.pallas_call(
        functools.partial(layer_norm_backward_kernel, R=R),
        out_shape=[jax.ShapeDtypeStruct(x.shape, dy.dtype),
                   jax.ShapeDtypeStruct((1, D), scale.dtype),
                   jax.ShapeDtypeStruct((1, D), scale.dtype)],
        grid=(pl.cdiv(R, block_rows),),
        in_specs=[rows, whole, per_row, per_row, rows],
        out_specs=[rows, whole, whole],
        scratch_shapes=[pltpu.VMEM((1, D), scale.dtype), pltpu.VMEM((1, D), scale.dtype)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
    )(x, scale.reshape(1, D), mean, rstd, dy)
    return dx, dscale.reshape(D), dbias.reshape(D)
