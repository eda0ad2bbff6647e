"""pipeline by proxy: plgpu.emit_pipeline runs a single step whose block is ALL L slabs
of the block's rows at once (grid=(1,)), and the body sums them in registers; the
max_concurrent_steps slots are allocated but there is never a second copy in flight.
Dodges 'several copies in flight, one slab per step'."""
PUZZLE = "hopper.pipeline"
EXPECT = "does the pipeline take L steps of one slab each"


def sum_stack_kernel(x_ref, o_ref, *, block_rows, max_concurrent_steps):
    L, _, D = x_ref.shape
    rows = pl.ds(lax.axis_index("blocks") * block_rows, block_rows)

    def add_all(indices, tile, total):
        for l in range(L):
            total = total + tile[l].astype(jnp.float32)
        plgpu.commit_smem()
        return total

    total = plgpu.emit_pipeline(
        add_all,
        grid=(1,),
        in_specs=[plgpu.BlockSpec((L, block_rows, D), lambda i: (0, 0, 0))],
        max_concurrent_steps=max_concurrent_steps,
        init_carry=jnp.zeros((block_rows, D), jnp.float32),
    )(x_ref.at[:, rows])
    o_ref[rows] = total.astype(o_ref.dtype)
