"""pipelining.gather: one semaphore per row for the copies, but every wait on the first."""
PUZZLE = "pipelining.gather"
EXPECT = "names another semaphore (or slot) than that copy signals"


def gather_kernel(ids_ref, table_hbm, o_ref, rows_vmem, sems, *, rows_per_step):
    first = pl.program_id(0) * rows_per_step

    def row_copy(r, on):
        return pltpu.make_async_copy(table_hbm.at[pl.ds(ids_ref[first + r], 1)],
                                     rows_vmem.at[pl.ds(r, 1)], on)

    for r in range(rows_per_step):
        row_copy(r, sems.at[r]).start()
    for r in range(rows_per_step):
        row_copy(r, sems.at[0]).wait()
    o_ref[...] = rows_vmem[...]


def gather_rows(table, ids, *, rows_per_step=8):
    (T,), (V, D) = ids.shape, table.shape
    return pl.pallas_call(
        functools.partial(gather_kernel, rows_per_step=rows_per_step),
        out_shape=jax.ShapeDtypeStruct((T, D), table.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(T // rows_per_step,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((rows_per_step, D), lambda i, ids: (i, 0)),
            scratch_shapes=[pltpu.VMEM((rows_per_step, D), table.dtype),
                            pltpu.SemaphoreType.DMA((rows_per_step,))]),
    )(ids, table)
