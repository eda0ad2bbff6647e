"""ragged_dot.differentiable: d lhs by a kernel of its own that reads rhs as it is (no
transposed copy, megablox's transpose_rhs), whose index maps forget the padding steps:
past num_tiles the N index keeps cycling, and each padding step fetches its blocks again."""
PUZZLE = "ragged_dot.differentiable"
EXPECT = "the block along N (its contraction) included"


def gmm_rhs_transposed_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref,
                              num_tiles_ref, grad_ref, rhs_ref, out_ref, acc_ref, *, tm):
    visit, j = pl.program_id(1), pl.program_id(2)

    @pl.when(visit < num_tiles_ref[0])
    def real_visit():
        @pl.when(j == 0)
        def start():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        # grad (tm, tn) times rhs's (tk, tn) block, transposed: contract the N dims.
        acc_ref[...] += jax.lax.dot_general(
            grad_ref[...], rhs_ref[...], (((1,), (1,)), ((), ())),
            preferred_element_type=jnp.float32)

        @pl.when(j == pl.num_programs(2) - 1)
        def store():
            group = group_ids_ref[visit]
            rows = m_tile_ids_ref[visit] * tm + jax.lax.broadcasted_iota(jnp.int32,
                                                                         out_ref.shape, 0)
            mine = (rows >= group_offsets_ref[group]) & (rows < group_offsets_ref[group + 1])
            out_ref[...] = jnp.where(mine, acc_ref[...].astype(out_ref.dtype), out_ref[...])


def gmm_rhs_transposed(grad, rhs, group_sizes, *, tiling):
    """grad [M, N], rhs [E, K, N] -> [M, K]: each group's rows of grad times rhs[e].T."""
    (M, N), (K,) = grad.shape, rhs.shape[1:2]
    tm, tk, tn = min(tiling[0], pl.cdiv(M, 8) * 8), min(tiling[1], K), min(tiling[2], N)
    group_offsets, group_ids, m_tile_ids, num_tiles = make_group_metadata(group_sizes, M, tm)

    def grad_index_map(k, visit, j, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (m_tile_ids[visit], j)

    def rhs_index_map(k, visit, j, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (group_ids[visit], k, j)

    def out_index_map(k, visit, j, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (m_tile_ids[visit], k)

    return pl.pallas_call(
        functools.partial(gmm_rhs_transposed_kernel, tm=tm),
        out_shape=jax.ShapeDtypeStruct((M, K), grad.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(pl.cdiv(K, tk), len(group_ids), pl.cdiv(N, tn)),
            in_specs=[pl.BlockSpec((tm, tn), grad_index_map),
                      pl.BlockSpec((None, tk, tn), rhs_index_map)],
            out_specs=pl.BlockSpec((tm, tk), out_index_map),
            scratch_shapes=[pltpu.VMEM((tm, tk), jnp.float32)]),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary")),
    )(group_offsets, group_ids, m_tile_ids, num_tiles.reshape(1), grad, rhs)


def ragged_dot(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    tm, tk, tn = tiling

    @jax.custom_vjp
    def grouped(lhs, rhs, group_sizes):
        return gmm(lhs, rhs, group_sizes, tiling=(tm, tk, tn))

    def grouped_forward(lhs, rhs, group_sizes):
        return grouped(lhs, rhs, group_sizes), (lhs, rhs, group_sizes)

    def grouped_backward(residuals, grad):
        lhs, rhs, group_sizes = residuals
        d_lhs = gmm_rhs_transposed(grad, rhs, group_sizes, tiling=(tm, tk, tn))
        d_rhs = tgmm(lhs.T, grad, group_sizes, tiling=(tm, tk, tn))
        return d_lhs, d_rhs, None

    grouped.defvjp(grouped_forward, grouped_backward)
    return grouped(lhs, rhs, group_sizes)
