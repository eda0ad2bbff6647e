"""pipelining.gather: reads ids[r] at every grid step instead of ids[step * rows + r]."""
PUZZLE = "pipelining.gather"
EXPECT = "offset the index by first = pl.program_id(0) * rows_per_step"


def gather_kernel(ids_ref, table_hbm, o_ref, rows_vmem, sem, *, rows_per_step):
    def row_copy(r):
        return pltpu.make_async_copy(table_hbm.at[pl.ds(ids_ref[r], 1)],
                                     rows_vmem.at[pl.ds(r, 1)], sem)

    for r in range(rows_per_step):
        row_copy(r).start()
    for r in range(rows_per_step):
        row_copy(r).wait()
    o_ref[...] = rows_vmem[...]
