"""hopper.pipeline summing into a float32 SMEM scratch of the kernel's own instead of
the pipeline's carry: zeroed before the pipeline, added to in place by the body, read
once after it; the slab sliced by a BlockSpec over a 3-D window x_ref.at[:, rows]."""
PUZZLE = "hopper.pipeline"


def _stack_sum_kernel(x_ref, o_ref, total, *, block_rows, max_concurrent_steps):
    L, _, D = x_ref.shape
    rows = pl.ds(lax.axis_index("blocks") * block_rows, block_rows)
    total[...] = jnp.zeros(total.shape, jnp.float32)

    def add_slab(indices, slab):
        total[...] += slab[...].astype(jnp.float32)
        plgpu.commit_smem()

    plgpu.emit_pipeline(
        add_slab,
        grid=(L,),
        in_specs=[plgpu.BlockSpec((None, block_rows, D), lambda l: (l, 0, 0))],
        max_concurrent_steps=max_concurrent_steps,
    )(x_ref.at[:, rows])
    o_ref[rows] = total[...].astype(o_ref.dtype)


def sum_stack(x, *, block_rows=64, max_concurrent_steps=2):
    L, M, D = x.shape
    _check_divides("sum_stack", "block_rows", block_rows, M, "M")
    if max_concurrent_steps < 1:
        raise ValueError(f"sum_stack: max_concurrent_steps={max_concurrent_steps} is "
                         "less than 1")
    return plgpu.kernel(
        functools.partial(_stack_sum_kernel, block_rows=block_rows,
                          max_concurrent_steps=min(max_concurrent_steps, L)),
        out_type=jax.ShapeDtypeStruct((M, D), x.dtype),
        grid=(M // block_rows,),
        grid_names=("blocks",),
        scratch_types=[plgpu.SMEM((block_rows, D), jnp.float32)],
    )(x)
