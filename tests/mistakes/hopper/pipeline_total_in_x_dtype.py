"""hopper.pipeline: the running total is carried in x's dtype (bfloat16 in the edge case):
every addition rounds it."""
PUZZLE = "hopper.pipeline"
EXPECT = "start it from jnp.zeros((block_rows, D), jnp.float32)"


def sum_stack_kernel(x_ref, o_ref, *, block_rows, max_concurrent_steps):
    L, _, D = x_ref.shape
    rows = pl.ds(lax.axis_index("blocks") * block_rows, block_rows)

    def add_tile(indices, tile, total):
        total = total + tile[...]
        plgpu.commit_smem()
        return total

    total = plgpu.emit_pipeline(
        add_tile,
        grid=(L,),
        in_specs=[plgpu.BlockSpec((None, block_rows, D), lambda l: (l, 0, 0))],
        max_concurrent_steps=max_concurrent_steps,
        init_carry=jnp.zeros((block_rows, D), x_ref.dtype),
    )(x_ref.at[:, rows])
    o_ref[rows] = total
