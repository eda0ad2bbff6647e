"""ragged_dot.masked: both grid axes marked "parallel", though consecutive visits write one
output tile."""
PUZZLE = "ragged_dot.masked"
EXPECT = 'Mark axis 1 "arbitrary"'


def gmm_masked(lhs, rhs, group_sizes, *, tm=128, tn=128):
    M, K = lhs.shape
    E, _, N = rhs.shape
    if tm % 8 or N % tn:
        raise ValueError(f"gmm_masked: tm={tm} must be a multiple of 8 and N={N} of tn={tn}")
    group_offsets, group_ids, m_tile_ids, num_tiles = make_group_metadata(group_sizes, M, tm)

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
            grid=(N // tn, len(group_ids)),
            in_specs=[pl.BlockSpec((tm, K), lhs_index_map),
                      pl.BlockSpec((None, K, tn), rhs_index_map)],
            out_specs=pl.BlockSpec((tm, tn), out_index_map)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(group_offsets, group_ids, m_tile_ids, num_tiles.reshape(1), lhs, rhs)
