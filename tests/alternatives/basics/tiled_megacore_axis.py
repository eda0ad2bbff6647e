"""basics.tiled written as JAX's paged attention lays out its grid: a leading axis of
size 1 (there, the megacore split of a batch that may not divide by two), whose program
id is always 0, and 3-D views of the rows. The same steps in the same order."""
PUZZLE = "basics.tiled"


def add_one_tiled(x, *, bm=8):
    M, D = x.shape
    rows = pl.BlockSpec((bm, D), lambda core, i: (core + i, 0))
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(1, pl.cdiv(M, bm)),
        in_specs=[rows],
        out_specs=rows,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary")),
    )(x)
