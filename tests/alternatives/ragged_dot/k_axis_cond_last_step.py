"""ragged_dot.k_axis in megablox's kernel style: the last K step told apart by lax.cond
between two Python-built branches (the K tail masked, and the masked store, only in
the last), the tail masked with lax.select, the product lax.dot_general; the padding
steps kept on the last real blocks by lax.select in the index maps; the tiling checked
and shrunk by a helper of its own."""
from jax import lax

PUZZLE = "ragged_dot.k_axis"


def _tiles_for(tiling, M, K, N):
    tiling = tuple(tiling)
    if len(tiling) != 3 or any(not isinstance(t, int) or t < 1 for t in tiling):
        raise ValueError(f"gmm: tiling={tiling} must be three positive ints")
    tm, tk, tn = tiling
    if tm % 8:
        raise ValueError(f"gmm: tiling={tiling}: tm must be a multiple of 8")
    return min(tm, -(-M // 8) * 8), min(tk, K), min(tn, N)


def _gmm_visit_kernel(offsets_ref, groups_ref, tiles_ref, count_ref, lhs_ref, rhs_ref,
                      out_ref, acc_ref, *, tm, k_tail):
    v, k = pl.program_id(1), pl.program_id(2)

    def step(last):
        lhs, rhs = lhs_ref[...], rhs_ref[...]
        if last and k_tail:
            lhs = lax.select(lax.broadcasted_iota(jnp.int32, lhs.shape, 1) < k_tail, lhs,
                             jnp.zeros_like(lhs))
            rhs = lax.select(lax.broadcasted_iota(jnp.int32, rhs.shape, 0) < k_tail, rhs,
                             jnp.zeros_like(rhs))
        acc_ref[...] += lax.dot_general(lhs, rhs, (((1,), (0,)), ((), ())),
                                        preferred_element_type=jnp.float32)
        if last:
            g = groups_ref[v]
            row = tiles_ref[v] * tm + lax.broadcasted_iota(jnp.int32, out_ref.shape, 0)
            owned = (row >= offsets_ref[g]) & (row < offsets_ref[g + 1])
            out_ref[...] = lax.select(owned, acc_ref[...].astype(out_ref.dtype), out_ref[...])

    @pl.when(v < count_ref[0])
    def _():
        @pl.when(k == 0)
        def _():
            acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

        lax.cond(k == pl.num_programs(2) - 1, lambda: step(True), lambda: step(False))


def gmm(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    if lhs.ndim != 2 or rhs.ndim != 3 or rhs.shape[1] != lhs.shape[1]:
        raise ValueError(f"gmm: lhs [M, K] and rhs [E, K, N] needed; got lhs of shape "
                         f"{lhs.shape} and rhs of shape {rhs.shape}")
    if lhs.dtype != rhs.dtype or not jnp.issubdtype(lhs.dtype, jnp.floating):
        raise ValueError(f"gmm: lhs ({lhs.dtype}) and rhs ({rhs.dtype}) must share a "
                         "floating dtype")
    M, K = lhs.shape
    E, _, N = rhs.shape
    if group_sizes.shape != (E,) or group_sizes.dtype != jnp.int32:
        raise ValueError(f"gmm: group_sizes of shape {group_sizes.shape} and dtype "
                         f"{group_sizes.dtype}: int32 [E={E}] needed")
    tm, tk, tn = _tiles_for(tiling, M, K, N)
    offsets, groups, tiles, count = make_group_metadata(group_sizes, M, tm)
    last_k = -(-K // tk) - 1

    def lhs_map(n, v, k, offsets, groups, tiles, count):
        return tiles[v], lax.select(v < count[0], k, last_k)

    def rhs_map(n, v, k, offsets, groups, tiles, count):
        return groups[v], lax.select(v < count[0], k, last_k), n

    def out_map(n, v, k, offsets, groups, tiles, count):
        return tiles[v], n

    return pl.pallas_call(
        functools.partial(_gmm_visit_kernel, tm=tm, k_tail=K % tk),
        out_shape=jax.ShapeDtypeStruct((M, N), lhs.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(-(-N // tn), groups.shape[0], last_k + 1),
            in_specs=[pl.BlockSpec((tm, tk), lhs_map),
                      pl.BlockSpec((None, tk, tn), rhs_map)],
            out_specs=pl.BlockSpec((tm, tn), out_map),
            scratch_shapes=[pltpu.VMEM((tm, tn), jnp.float32)]),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary")),
    )(offsets, groups, tiles, count.reshape(1), lhs, rhs)
