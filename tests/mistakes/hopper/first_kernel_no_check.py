"""hopper.first_kernel: add_one does not check block_rows: a block_rows that does not
divide M silently skips rows."""
PUZZLE = "hopper.first_kernel"
EXPECT = 'should raise a ValueError naming block_rows'


def add_one(x, *, block_rows=64):
    M, D = x.shape
    return plgpu.kernel(
        functools.partial(add_one_kernel, block_rows=block_rows),
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(M // block_rows,),
        grid_names=("blocks",),
        scratch_types=[plgpu.SMEM((block_rows, D), x.dtype)],
    )(x)
