"""pipelining.copy_loop with pl.loop over the chunks and the float32 running sum kept
in a VMEM scratch of its own (a loop without a carry), stored once at the end."""
PUZZLE = "pipelining.copy_loop"


def column_sum_kernel(x_hbm, o_ref, chunk_vmem, sem, total_vmem, *, chunk):
    total_vmem[...] = jnp.zeros(total_vmem.shape, jnp.float32)

    @pl.loop(0, x_hbm.shape[0] // chunk)
    def _(i):
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(i * chunk, chunk)], chunk_vmem, sem)
        copy.start()
        copy.wait()
        total_vmem[...] += jnp.sum(chunk_vmem[...], axis=0, keepdims=True,
                                   dtype=jnp.float32)

    o_ref[...] = total_vmem[...].astype(o_ref.dtype)


def column_sum(x, *, chunk):
    S, D = x.shape
    if S % chunk:
        raise ValueError(f"column_sum: chunk={chunk} must divide S={S}")
    return pl.pallas_call(
        functools.partial(column_sum_kernel, chunk=chunk),
        out_shape=jax.ShapeDtypeStruct((1, D), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((chunk, D), x.dtype), pltpu.SemaphoreType.DMA(()),
                        pltpu.VMEM((1, D), jnp.float32)],
    )(x)
