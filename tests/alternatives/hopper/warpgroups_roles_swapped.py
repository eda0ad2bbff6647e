"""hopper.warpgroups with the roles the other way round (warpgroup 0 produces, 1
consumes), both loops written as lax.fori_loop, the slot as Python's % on the traced
step, and the stores into o_ref spelled through .at."""
PUZZLE = "hopper.warpgroups"


def _ring_kernel(x_ref, o_ref, tiles, loaded, consumed, *, block_rows):
    steps = x_ref.shape[0] // block_rows
    slots = tiles.shape[0]
    role = lax.axis_index("wg")

    @pl.when(role == 0)
    def _produce():
        def fetch(i, carry):
            slot = i % slots

            @pl.when(i >= slots)
            def _():
                plgpu.barrier_wait(consumed.at[slot])

            plgpu.copy_gmem_to_smem(x_ref.at[pl.ds(i * block_rows, block_rows)],
                                    tiles.at[slot], loaded.at[slot])
            return carry

        lax.fori_loop(0, steps, fetch, None)

    @pl.when(role == 1)
    def _consume():
        def compute(i, carry):
            slot = i % slots
            plgpu.barrier_wait(loaded.at[slot])
            o_ref.at[pl.ds(i * block_rows, block_rows)][...] = tiles.at[slot][...] + 1
            plgpu.commit_smem()

            @pl.when(i < steps - slots)
            def _():
                plgpu.barrier_arrive(consumed.at[slot])

            return carry

        lax.fori_loop(0, steps, compute, None)


def add_one_specialized(x, *, block_rows=64):
    S, D = x.shape
    _check_divides("add_one_specialized", "block_rows", block_rows, S, "S")
    return plgpu.kernel(
        functools.partial(_ring_kernel, block_rows=block_rows),
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        num_threads=2,
        thread_name="wg",
        scratch_types=[plgpu.SMEM((2, block_rows, D), x.dtype),
                       plgpu.Barrier(num_barriers=2), plgpu.Barrier(num_barriers=2)],
    )(x)
