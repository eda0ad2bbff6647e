"""ragged_dot.tgmm: out's index map returns (group_ids[visit], n, k): K and N blocks
swapped."""
PUZZLE = "ragged_dot.tgmm"
EXPECT = "out's index map names block"


def tgmm(lhs, grad, group_sizes, *, tiling=(128, 128, 128)):
    """Transposed grouped matmul: out[e] = lhs[:, rows of group e] @ grad[rows of group e].

    lhs: [K, M]; grad: [M, N]; group_sizes: int32 [E], summing to M. tiling (tm, tk, tn)
        as gmm's, here tm a multiple of 128 (it is lhs's last block dim) or M itself.

    Returns [E, K, N] in lhs's dtype: the gradient of gmm's rhs when lhs is gmm's lhs
    transposed and grad the output's cotangent. A group with no rows gets zeros.
    """
    if lhs.ndim != 2 or grad.ndim != 2:
        raise ValueError(f"tgmm: lhs must be [K, M] and grad [M, N]; got shapes "
                         f"{lhs.shape} and {grad.shape}")
    (K, M), (M_grad, N) = lhs.shape, grad.shape
    if M_grad != M:
        raise ValueError(f"tgmm: grad must be [M={M}, N] like lhs [K, M]; got {grad.shape}")
    if lhs.dtype != grad.dtype or not jnp.issubdtype(lhs.dtype, jnp.floating):
        raise ValueError(f"tgmm: lhs and grad must share one floating dtype; got "
                         f"{lhs.dtype} and {grad.dtype}")
    _check_groups("tgmm", group_sizes)
    E = len(group_sizes)
    tm, tk, tn = _check_tiling("tgmm", tiling, (M, K, N))
    group_offsets, group_ids, m_tile_ids, num_tiles = make_group_metadata(
        group_sizes, M, tm, visit_empty_groups=True)

    def lhs_index_map(n, k, visit, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (k, m_tile_ids[visit])

    def grad_index_map(n, k, visit, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (m_tile_ids[visit], n)

    def out_index_map(n, k, visit, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (group_ids[visit], n, k)

    return pl.pallas_call(
        functools.partial(tgmm_kernel, tm=tm),
        out_shape=jax.ShapeDtypeStruct((E, K, N), lhs.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(pl.cdiv(N, tn), pl.cdiv(K, tk), len(group_ids)),
            in_specs=[pl.BlockSpec((tk, tm), lhs_index_map),
                      pl.BlockSpec((tm, tn), grad_index_map)],
            out_specs=pl.BlockSpec((None, tk, tn), out_index_map),
            scratch_shapes=[pltpu.VMEM((tk, tn), jnp.float32)]),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(group_offsets, group_ids, m_tile_ids, num_tiles.reshape(1), lhs, grad)
