"""hopper.pipeline: the body reads its tile and returns without commit_smem: the
pipeline's next copy into that slot is not ordered after the read (a race)."""
PUZZLE = "hopper.pipeline"
EXPECT = "end the body with plgpu.commit_smem()"


def sum_stack_kernel(x_ref, o_ref, *, block_rows, max_concurrent_steps):
    L, _, D = x_ref.shape
    rows = pl.ds(lax.axis_index("blocks") * block_rows, block_rows)

    def add_tile(indices, tile, total):
        return total + tile[...].astype(jnp.float32)

    total = plgpu.emit_pipeline(
        add_tile,
        grid=(L,),
        in_specs=[plgpu.BlockSpec((None, block_rows, D), lambda l: (l, 0, 0))],
        max_concurrent_steps=max_concurrent_steps,
        init_carry=jnp.zeros((block_rows, D), jnp.float32),
    )(x_ref.at[:, rows])
    o_ref[rows] = total.astype(o_ref.dtype)
