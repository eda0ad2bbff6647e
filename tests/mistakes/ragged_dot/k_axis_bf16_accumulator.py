"""ragged_dot.k_axis: the accumulator takes the inputs' dtype, so bf16 inputs get a bf16
running sum, rounded at every K step (the dot itself is asked for float32)."""
PUZZLE = "ragged_dot.k_axis"
EXPECT = "Keep the running sum in a float32 scratch"


def gmm_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref, lhs_ref,
               rhs_ref, out_ref, acc_ref, *, tm, tk, k_size):
    visit, k = pl.program_id(1), pl.program_id(2)

    @pl.when(visit < num_tiles_ref[0])
    def real_visit():
        @pl.when(k == 0)
        def start_tile():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        lhs, rhs = lhs_ref[...], rhs_ref[...]
        if k_size % tk:
            valid = k_size - k * tk
            lhs = jnp.where(jax.lax.broadcasted_iota(jnp.int32, lhs.shape, 1) < valid, lhs, 0)
            rhs = jnp.where(jax.lax.broadcasted_iota(jnp.int32, rhs.shape, 0) < valid, rhs, 0)
        acc_ref[...] += jnp.dot(lhs, rhs,
                                preferred_element_type=jnp.float32).astype(acc_ref.dtype)

        @pl.when(k == pl.num_programs(2) - 1)
        def store_tile():
            group = group_ids_ref[visit]
            rows = m_tile_ids_ref[visit] * tm + jax.lax.broadcasted_iota(jnp.int32,
                                                                         out_ref.shape, 0)
            mine = (rows >= group_offsets_ref[group]) & (rows < group_offsets_ref[group + 1])
            out_ref[...] = jnp.where(mine, acc_ref[...].astype(out_ref.dtype), out_ref[...])


def gmm(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    if lhs.ndim != 2 or rhs.ndim != 3 or rhs.shape[1] != lhs.shape[1]:
        raise ValueError(f"gmm: lhs [M, K] and rhs [E, K, N]; got {lhs.shape}, {rhs.shape}")
    (M, K), (E, _, N) = lhs.shape, rhs.shape
    _check_groups("gmm", group_sizes, E)
    tm, tk, tn = _check_tiling("gmm", tiling, (M, K, N))
    group_offsets, group_ids, m_tile_ids, num_tiles = make_group_metadata(group_sizes, M, tm)
    tiles_k = pl.cdiv(K, tk)

    def k_block(visit, k, num_tiles):
        return jnp.where(visit < num_tiles[0], k, tiles_k - 1)

    def lhs_index_map(n, visit, k, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (m_tile_ids[visit], k_block(visit, k, num_tiles))

    def rhs_index_map(n, visit, k, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (group_ids[visit], k_block(visit, k, num_tiles), n)

    def out_index_map(n, visit, k, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (m_tile_ids[visit], n)

    return pl.pallas_call(
        functools.partial(gmm_kernel, tm=tm, tk=tk, k_size=K),
        out_shape=jax.ShapeDtypeStruct((M, N), lhs.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(pl.cdiv(N, tn), len(group_ids), tiles_k),
            in_specs=[pl.BlockSpec((tm, tk), lhs_index_map),
                      pl.BlockSpec((None, tk, tn), rhs_index_map)],
            out_specs=pl.BlockSpec((tm, tn), out_index_map),
            scratch_shapes=[pltpu.VMEM((tm, tn), lhs.dtype)]),    # bf16 for bf16 inputs
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary")),
    )(group_offsets, group_ids, m_tile_ids, num_tiles.reshape(1), lhs, rhs)
