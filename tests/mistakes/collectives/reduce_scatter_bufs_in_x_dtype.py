"""Slip: send/recv buffers in x.dtype (bf16 partial sums) and no float32 cast; diagnosis should say keep partial sums in float32."""
PUZZLE = "collectives.reduce_scatter"
EXPECT = 'send_buf and recv_buf are float32 scratch'


def reduce_scatter(x, *, axis_name):
    n = lax.axis_size(axis_name)
    _check_rows("reduce_scatter", x, n)
    block = (x.shape[0] // n, *x.shape[1:])
    return pl.pallas_call(
        functools.partial(reduce_scatter_kernel, axis_name=axis_name),
        out_shape=jax.ShapeDtypeStruct(block, x.dtype),
        scratch_shapes=[pltpu.VMEM(block, x.dtype),   # the partial sum we send
                        pltpu.VMEM(block, x.dtype),   # where the left one's lands
                        pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.REGULAR],     # "my recv_buf is free"
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x)
