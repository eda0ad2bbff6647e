"""hopper.pipeline: a pipeline whose body does nothing with its tiles, the sum read
straight from global memory with plain loads: the pipeline's copies are a decoy."""
PUZZLE = "hopper.pipeline"
EXPECT = "your kernel loads from a GMEM ref with [...] itself"


def sum_stack_kernel(x_ref, o_ref, *, block_rows, max_concurrent_steps):
    L, _, D = x_ref.shape
    rows = pl.ds(lax.axis_index("blocks") * block_rows, block_rows)

    def add_tile(indices, tile, total):
        plgpu.commit_smem()
        return total

    plgpu.emit_pipeline(
        add_tile,
        grid=(L,),
        in_specs=[plgpu.BlockSpec((None, block_rows, D), lambda l: (l, 0, 0))],
        max_concurrent_steps=max_concurrent_steps,
        init_carry=jnp.zeros((block_rows, D), jnp.float32),
    )(x_ref.at[:, rows])
    total = jnp.zeros((block_rows, D), jnp.float32)
    for l in range(L):
        total = total + x_ref[l, rows].astype(jnp.float32)
    o_ref[rows] = total.astype(o_ref.dtype)
