"""ragged_dot.masked: the metadata made with visit_empty_groups=True: an empty group's
visit stores no row (the values are right) but computes a tile and fetches its expert."""
PUZZLE = "ragged_dot.masked"
EXPECT = "gmm's metadata gives them no visit"


def gmm_masked(lhs, rhs, group_sizes, *, tm=128, tn=128):
    M, K = lhs.shape
    E, _, N = rhs.shape
    metadata = make_group_metadata(group_sizes, M, tm, visit_empty_groups=True)
    group_offsets, group_ids, m_tile_ids, num_tiles = metadata

    def lhs_index_map(n, visit, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (m_tile_ids[visit], 0)

    def rhs_index_map(n, visit, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (group_ids[visit], 0, n)

    def out_index_map(n, visit, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (m_tile_ids[visit], n)

    return pl.pallas_call(
        functools.partial(gmm_masked_kernel, tm=tm),
        out_shape=jax.ShapeDtypeStruct((M, N), lhs.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(N // tn, group_ids.shape[0]),
            in_specs=[pl.BlockSpec((tm, K), lhs_index_map),
                      pl.BlockSpec((None, K, tn), rhs_index_map)],
            out_specs=pl.BlockSpec((tm, tn), out_index_map)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(group_offsets, group_ids, m_tile_ids, num_tiles.reshape(1), lhs, rhs)
