"""hopper.pipeline: max_concurrent_steps is not passed on: the pipeline keeps one copy in
flight, and the SM waits for every slab."""
PUZZLE = "hopper.pipeline"
EXPECT = "is max_concurrent_steps handed through"


def sum_stack_kernel(x_ref, o_ref, *, block_rows, max_concurrent_steps):
    L, _, D = x_ref.shape
    rows = pl.ds(lax.axis_index("blocks") * block_rows, block_rows)

    def add_tile(indices, tile, total):
        total = total + tile[...].astype(jnp.float32)
        plgpu.commit_smem()
        return total

    total = plgpu.emit_pipeline(
        add_tile,
        grid=(L,),
        in_specs=[plgpu.BlockSpec((None, block_rows, D), lambda l: (l, 0, 0))],
        init_carry=jnp.zeros((block_rows, D), jnp.float32),
    )(x_ref.at[:, rows])
    o_ref[rows] = total.astype(o_ref.dtype)
