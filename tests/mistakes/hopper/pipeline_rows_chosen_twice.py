"""hopper.pipeline: the block's rows are chosen twice, by the .at[] view and by the
index map: block b reads past its view."""
PUZZLE = "hopper.pipeline"
EXPECT = 'with both, block b reads rows 2 * b * block_rows on'


def sum_stack_kernel(x_ref, o_ref, *, block_rows, max_concurrent_steps):
    L, _, D = x_ref.shape
    rows = pl.ds(lax.axis_index("blocks") * block_rows, block_rows)

    def add_tile(indices, tile, total):
        total = total + tile[...].astype(jnp.float32)
        plgpu.commit_smem()   # done reading this slot: the pipeline may refill it
        return total

    total = plgpu.emit_pipeline(
        add_tile,
        grid=(L,),
        in_specs=[plgpu.BlockSpec((None, block_rows, D), lambda l: (l, lax.axis_index("blocks"), 0))],
        max_concurrent_steps=max_concurrent_steps,
        init_carry=jnp.zeros((block_rows, D), jnp.float32),
    )(x_ref.at[:, rows])
    o_ref[rows] = total.astype(o_ref.dtype)
