"""ragged_dot.gather: x's index map returns the grid index, not the listed tile."""
PUZZLE = "ragged_dot.gather"
EXPECT = "x's index map must read the list"


def gather_tiles(x, tile_ids, *, tm=8):
    M, D = x.shape
    (V,) = tile_ids.shape

    def index_map(i, tile_ids_ref):
        return (i, 0)

    return pl.pallas_call(
        gather_kernel,
        out_shape=jax.ShapeDtypeStruct((V * tm, D), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(V,),
            in_specs=[pl.BlockSpec((tm, D), index_map)],
            out_specs=pl.BlockSpec((tm, D), index_map)),
    )(tile_ids, x)
