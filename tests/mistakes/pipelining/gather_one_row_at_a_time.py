"""pipelining.gather: starts and waits each row's copy in turn, so the rows land one
after another instead of together."""
PUZZLE = "pipelining.gather"
EXPECT = "Start every row's copy of a step before waiting for any"


def gather_kernel(ids_ref, table_hbm, o_ref, rows_vmem, sem, *, rows_per_step):
    first = pl.program_id(0) * rows_per_step
    for r in range(rows_per_step):
        copy = pltpu.make_async_copy(table_hbm.at[pl.ds(ids_ref[first + r], 1)],
                                     rows_vmem.at[pl.ds(r, 1)], sem)
        copy.start()
        copy.wait()
    o_ref[...] = rows_vmem[...]
