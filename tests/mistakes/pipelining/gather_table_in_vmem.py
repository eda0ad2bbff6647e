"""pipelining.gather: the whole table through a BlockSpec, rows picked in VMEM."""
PUZZLE = "pipelining.gather"
EXPECT = "the whole table went through a BlockSpec"


def gather_rows(table, ids, *, rows_per_step=8):
    (T,), (V, D) = ids.shape, table.shape

    def kernel(ids_ref, table_ref, o_ref):
        first = pl.program_id(0) * rows_per_step
        for r in range(rows_per_step):
            o_ref[pl.ds(r, 1), :] = table_ref[pl.ds(ids_ref[first + r], 1), :]

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((T, D), table.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(T // rows_per_step,),
            in_specs=[pl.BlockSpec((V, D), lambda i, ids: (0, 0))],
            out_specs=pl.BlockSpec((rows_per_step, D), lambda i, ids: (i, 0))),
    )(ids, table)
