"""ragged_dot.masked with rhs blocks of (1, K, tn) (the expert dim kept, of size 1,
indexed [0] in the kernel) instead of squeezed, the index maps as lambdas, the product
spelled lax.dot_general, and the row mask built as a (tm, 1) column that jnp.where
broadcasts over the tile."""
from jax import lax

PUZZLE = "ragged_dot.masked"


def _masked_visit_kernel(offsets_ref, groups_ref, tiles_ref, count_ref, lhs_ref, rhs_ref,
                         out_ref, *, tm):
    v = pl.program_id(1)

    @pl.when(v < count_ref[0])
    def _():
        g = groups_ref[v]
        row = tiles_ref[v] * tm + lax.broadcasted_iota(jnp.int32, (tm, 1), 0)
        owned = jnp.logical_and(offsets_ref[g] <= row, row < offsets_ref[g + 1])
        product = lax.dot_general(lhs_ref[...], rhs_ref[0], (((1,), (0,)), ((), ())),
                                  preferred_element_type=jnp.float32)
        out_ref[...] = jnp.where(owned, product.astype(out_ref.dtype), out_ref[...])


def gmm_masked(lhs, rhs, group_sizes, *, tm=128, tn=128):
    M, K = lhs.shape
    N = rhs.shape[2]
    if tm % 8:
        raise ValueError(f"gmm_masked: tm={tm} is not a multiple of 8")
    if N % tn:
        raise ValueError(f"gmm_masked: tn={tn} does not divide N={N}")
    offsets, groups, tiles, count = make_group_metadata(group_sizes, M, tm)
    return pl.pallas_call(
        functools.partial(_masked_visit_kernel, tm=tm),
        out_shape=jax.ShapeDtypeStruct((M, N), lhs.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(N // tn, groups.shape[0]),
            in_specs=[
                pl.BlockSpec((tm, K), lambda n, v, offsets, groups, tiles, count:
                             (tiles[v], 0)),
                pl.BlockSpec((1, K, tn), lambda n, v, offsets, groups, tiles, count:
                             (groups[v], 0, n)),
            ],
            out_specs=pl.BlockSpec((tm, tn), lambda n, v, offsets, groups, tiles, count:
                                   (tiles[v], n))),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(offsets, groups, tiles, jnp.reshape(count, (1,)), lhs, rhs)
