"""ragged_dot.gather on a 3-D view of x, [M / tm, tm, D], with the tile dim squeezed
(a reshape around the kernel moves no element), the index maps as lambdas that read the
prefetched list, and the kernel indexing whole refs with [:]."""
PUZZLE = "ragged_dot.gather"


def gather_kernel(tile_ids_ref, x_ref, o_ref):
    o_ref[:] = x_ref[:]


def gather_tiles(x, tile_ids, *, tm=8):
    M, D = x.shape
    V = tile_ids.shape[0]
    if M % tm:
        raise ValueError(f"gather_tiles: tm={tm} must divide M={M}")
    out = pl.pallas_call(
        gather_kernel,
        out_shape=jax.ShapeDtypeStruct((V, tm, D), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(V,),
            in_specs=[pl.BlockSpec((None, tm, D), lambda v, ids: (ids[v], 0, 0))],
            out_specs=pl.BlockSpec((None, tm, D), lambda v, ids: (v, 0, 0))),
    )(tile_ids, x.reshape(M // tm, tm, D))
    return out.reshape(V * tm, D)
