"""ragged_dot.gather: the output's index map also reads the list (tile_ids_ref[i]) instead
of the grid index i."""
PUZZLE = "ragged_dot.gather"
EXPECT = "in an output of V * tm rows"


def gather_tiles(x, tile_ids, *, tm=8):
    M, D = x.shape
    (V,) = tile_ids.shape
    if M % tm:
        raise ValueError(f"gather_tiles: M={M} must be a multiple of tm={tm}")

    def x_index_map(i, tile_ids_ref):
        return (tile_ids_ref[i], 0)      # the tile the list names for step i

    def o_index_map(i, tile_ids_ref):
        return (tile_ids_ref[i], 0)

    return pl.pallas_call(
        gather_kernel,
        out_shape=jax.ShapeDtypeStruct((V * tm, D), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(V,),
            in_specs=[pl.BlockSpec((tm, D), x_index_map)],
            out_specs=pl.BlockSpec((tm, D), o_index_map)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(tile_ids, x)
