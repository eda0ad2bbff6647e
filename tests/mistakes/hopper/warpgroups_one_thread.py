"""hopper.warpgroups: the kernel is launched with one Pallas thread: the producer branch
(warpgroup 1) never runs and the consumer would wait forever."""
PUZZLE = "hopper.warpgroups"
EXPECT = "two Pallas threads per block"


def add_one_specialized(x, *, block_rows=64):
    S, D = x.shape
    _check_divides("add_one_specialized", "block_rows", block_rows, S, "S")
    return plgpu.kernel(
        functools.partial(add_one_specialized_kernel, block_rows=block_rows),
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        num_threads=1,
        thread_name="wg",
        scratch_types=[
            plgpu.SMEM((2, block_rows, D), x.dtype),
            plgpu.Barrier(num_barriers=2),
            plgpu.Barrier(num_barriers=2),
        ],
    )(x)
