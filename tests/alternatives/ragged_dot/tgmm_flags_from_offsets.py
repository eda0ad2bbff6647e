"""ragged_dot.tgmm telling a group's first and last visit from the rows instead of the
neighbouring group ids: the first visit is the one whose tile holds the group's first
row, the last the one whose tile holds its last row (an empty group's only visit is
both); every phase under the guard v < num_tiles; the row masks built as a (1, tm)
row for lhs and a (tm, 1) column for grad."""
from jax import lax

PUZZLE = "ragged_dot.tgmm"


def _tgmm_visit_kernel(offsets_ref, groups_ref, tiles_ref, count_ref, lhs_ref, grad_ref,
                       out_ref, acc_ref, *, tm):
    v = pl.program_id(2)
    g = groups_ref[v]
    start, end = offsets_ref[g], offsets_ref[g + 1]
    first_row = tiles_ref[v] * tm
    real = v < count_ref[0]
    empty = end <= start

    @pl.when(real & (empty | (first_row <= start)))
    def _():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    @pl.when(real & jnp.logical_not(empty))
    def _():
        cols = first_row + lax.broadcasted_iota(jnp.int32, (1, tm), 1)
        rows = first_row + lax.broadcasted_iota(jnp.int32, (tm, 1), 0)
        lhs = jnp.where((cols >= start) & (cols < end), lhs_ref[...], 0)
        grad = jnp.where((rows >= start) & (rows < end), grad_ref[...], 0)
        acc_ref[...] += lax.dot_general(lhs, grad, (((1,), (0,)), ((), ())),
                                        preferred_element_type=jnp.float32)

    @pl.when(real & (empty | (first_row + tm >= end)))
    def _():
        out_ref[...] = acc_ref[...].astype(out_ref.dtype)


def tgmm(lhs, grad, group_sizes, *, tiling=(128, 128, 128)):
    if lhs.ndim != 2 or grad.ndim != 2 or lhs.shape[1] != grad.shape[0]:
        raise ValueError(f"tgmm: lhs [K, M] and grad [M, N] needed; got {lhs.shape} and "
                         f"{grad.shape}")
    if lhs.dtype != grad.dtype or not jnp.issubdtype(lhs.dtype, jnp.floating):
        raise ValueError(f"tgmm: lhs ({lhs.dtype}) and grad ({grad.dtype}) must share a "
                         "floating dtype")
    if group_sizes.ndim != 1 or group_sizes.dtype != jnp.int32:
        raise ValueError(f"tgmm: group_sizes must be int32 [E]; got {group_sizes.dtype} "
                         f"{group_sizes.shape}")
    K, M = lhs.shape
    N = grad.shape[1]
    E = group_sizes.shape[0]
    tm, tk, tn = tiling
    if tm % 8:
        raise ValueError(f"tgmm: tiling={tiling}: tm must be a multiple of 8")
    tm, tk, tn = min(tm, -(-M // 8) * 8), min(tk, K), min(tn, N)
    offsets, groups, tiles, count = make_group_metadata(group_sizes, M, tm,
                                                        visit_empty_groups=True)
    return pl.pallas_call(
        functools.partial(_tgmm_visit_kernel, tm=tm),
        out_shape=jax.ShapeDtypeStruct((E, K, N), lhs.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(-(-N // tn), -(-K // tk), groups.shape[0]),
            in_specs=[
                pl.BlockSpec((tk, tm), lambda n, k, v, offsets, groups, tiles, count:
                             (k, tiles[v])),
                pl.BlockSpec((tm, tn), lambda n, k, v, offsets, groups, tiles, count:
                             (tiles[v], n)),
            ],
            out_specs=pl.BlockSpec((None, tk, tn), lambda n, k, v, offsets, groups, tiles,
                                   count: (groups[v], k, n)),
            scratch_shapes=[pltpu.VMEM((tk, tn), jnp.float32)]),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(offsets, groups, tiles, count.reshape(1), lhs, grad)
