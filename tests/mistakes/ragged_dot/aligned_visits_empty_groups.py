"""ragged_dot.aligned: the metadata made with visit_empty_groups=True: each empty group's
visit computes a tile (overwritten by the next group's visit of it) and fetches its
expert. With every row in the last group there are as many empty groups as padding
steps, so the flops alone are those of a kernel computing on its padding steps: the
bytes tell the two apart."""
PUZZLE = "ragged_dot.aligned"
EXPECT = "your kernel visits the empty groups too"

_make_group_metadata = make_group_metadata


def gmm_aligned(lhs, rhs, group_sizes, *, tm=128, tn=128):
    M, K = lhs.shape
    E, _, N = rhs.shape
    group_offsets, group_ids, m_tile_ids, num_tiles = _make_group_metadata(
        group_sizes, M, tm, visit_empty_groups=True)

    def lhs_index_map(n, visit, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (m_tile_ids[visit], 0)

    def rhs_index_map(n, visit, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (group_ids[visit], 0, n)

    def out_index_map(n, visit, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (m_tile_ids[visit], n)

    return pl.pallas_call(
        gmm_aligned_kernel,
        out_shape=jax.ShapeDtypeStruct((M, N), lhs.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(N // tn, len(group_ids)),
            in_specs=[pl.BlockSpec((tm, K), lhs_index_map),
                      pl.BlockSpec((None, K, tn), rhs_index_map)],
            out_specs=pl.BlockSpec((tm, tn), out_index_map)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(group_offsets, group_ids, m_tile_ids, num_tiles.reshape(1), lhs, rhs)
