"""pipelining.gather: a shortcut: no grid, one kernel invocation that copies every row of
the output in one go (all of T in VMEM at once)."""
PUZZLE = "pipelining.gather"
EXPECT = "this puzzle is about the grid, one step per block"


def gather_rows(table, ids, *, rows_per_step=8):
    (T,), (_, D) = ids.shape, table.shape

    def kernel(ids_ref, table_hbm, o_ref, rows_vmem, sem):
        for r in range(T):
            pltpu.make_async_copy(table_hbm.at[pl.ds(ids_ref[r], 1)],
                                  rows_vmem.at[pl.ds(r, 1)], sem).start()
        for r in range(T):
            pltpu.make_async_copy(table_hbm.at[pl.ds(ids_ref[r], 1)],
                                  rows_vmem.at[pl.ds(r, 1)], sem).wait()
        o_ref[...] = rows_vmem[...]

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((T, D), table.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((T, D), lambda ids: (0, 0)),
            scratch_shapes=[pltpu.VMEM((T, D), table.dtype), pltpu.SemaphoreType.DMA(())]),
    )(ids, table)
