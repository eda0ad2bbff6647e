"""Ragged dot (grouped matmul for mixture-of-experts) — reference solutions.

Same functions and signatures as exercises/ragged_dot.py. Learners see these
through `pytest --hint=3`, so they are written as code worth copying.

The chapter's public API, as JAX's megablox kernels
(jax/experimental/pallas/ops/tpu/megablox):

    make_group_metadata(group_sizes, m, tm)   -> (group_offsets, group_ids, m_tile_ids, num_tiles)
    gmm(lhs, rhs, group_sizes, *, tiling)     [M, K], [E, K, N] -> [M, N]
    tgmm(lhs, grad, group_sizes, *, tiling)   [K, M], [M, N] -> [E, K, N]
    ragged_dot(lhs, rhs, group_sizes, *, tiling)   gmm, differentiable

The grid's visit axis has a static length, tiles_m + E - 1, the most visits any
group sizes can need; the steps past num_tiles (known only at run time) do
nothing, and the metadata repeats the last real visit there, so they fetch
nothing new either.
"""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


# 1. ragged_dot.gather — scalar prefetch: an index list that index maps read ------

def gather_kernel(tile_ids_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...]          # the index map already picked the tile


def gather_tiles(x, tile_ids, *, tm=8):
    M, D = x.shape
    (V,) = tile_ids.shape
    if M % tm:
        raise ValueError(f"gather_tiles: M={M} must be a multiple of tm={tm}")

    def x_index_map(i, tile_ids_ref):
        return (tile_ids_ref[i], 0)      # the tile the list names for step i

    def o_index_map(i, tile_ids_ref):
        return (i, 0)

    return pl.pallas_call(
        gather_kernel,
        out_shape=jax.ShapeDtypeStruct((V * tm, D), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(V,),
            in_specs=[pl.BlockSpec((tm, D), x_index_map)],
            out_specs=pl.BlockSpec((tm, D), o_index_map)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(tile_ids, x)


# 2. ragged_dot.metadata — which (group, row tile) each grid step visits ----------

def make_group_metadata(group_sizes, m, tm, *, visit_empty_groups=False):
    group_sizes = jnp.asarray(group_sizes, jnp.int32)
    num_groups = len(group_sizes)
    tiles_m = pl.cdiv(m, tm)
    num_visits = tiles_m + num_groups - 1          # the most visits any sizes need

    group_ends = jnp.cumsum(group_sizes)
    group_offsets = jnp.concatenate([jnp.zeros(1, jnp.int32), group_ends]).astype(jnp.int32)
    group_starts = group_offsets[:-1]

    # A group visits every row tile it has a row in: from the tile of its first row to
    # the tile of its last. A tile two groups share is visited once by each.
    first_tile = group_starts // tm
    last_tile = (group_ends - 1) // tm
    empty_visits = 1 if visit_empty_groups else 0
    group_tiles = jnp.where(group_sizes > 0, last_tile - first_tile + 1, empty_visits)
    first_tile = jnp.minimum(first_tile, tiles_m - 1)   # an empty group at the very end
    num_tiles = jnp.sum(group_tiles).astype(jnp.int32)

    # Visit v belongs to group group_ids[v]; past num_tiles, repeat the last real visit.
    visit = jnp.minimum(jnp.arange(num_visits, dtype=jnp.int32), num_tiles - 1)
    group_ids = jnp.repeat(jnp.arange(num_groups, dtype=jnp.int32), group_tiles,
                           total_repeat_length=num_visits)[visit]
    first_visit = jnp.cumsum(group_tiles) - group_tiles    # each group's first visit
    m_tile_ids = first_tile[group_ids] + visit - first_visit[group_ids]
    return group_offsets, group_ids, m_tile_ids.astype(jnp.int32), num_tiles


# 3. ragged_dot.aligned — one expert per row tile -----------------------------------

def gmm_aligned_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref,
                       lhs_ref, rhs_ref, out_ref):
    visit = pl.program_id(1)

    @pl.when(visit < num_tiles_ref[0])
    def compute_tile():          # the padding steps past num_tiles do nothing
        out_ref[...] = jnp.dot(lhs_ref[...], rhs_ref[...],
                               preferred_element_type=jnp.float32).astype(out_ref.dtype)


def gmm_aligned(lhs, rhs, group_sizes, *, tm=128, tn=128):
    M, K = lhs.shape
    E, _, N = rhs.shape
    if M % tm or N % tn:
        raise ValueError(f"gmm_aligned: M={M} must be a multiple of tm={tm} and N={N} of "
                         f"tn={tn}")
    group_offsets, group_ids, m_tile_ids, num_tiles = make_group_metadata(group_sizes, M, tm)

    def lhs_index_map(n, visit, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (m_tile_ids[visit], 0)

    def rhs_index_map(n, visit, group_offsets, group_ids, m_tile_ids, num_tiles):
        return (group_ids[visit], 0, n)           # this visit's expert

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


# 4. ragged_dot.masked — a tile two groups share writes only its own rows -----------

def gmm_masked_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref,
                      lhs_ref, rhs_ref, out_ref, *, tm):
    visit = pl.program_id(1)

    @pl.when(visit < num_tiles_ref[0])
    def compute_tile():
        product = jnp.dot(lhs_ref[...], rhs_ref[...], preferred_element_type=jnp.float32)
        # The rows of this tile that belong to this visit's group.
        group = group_ids_ref[visit]
        rows = m_tile_ids_ref[visit] * tm + jax.lax.broadcasted_iota(jnp.int32, out_ref.shape, 0)
        mine = (rows >= group_offsets_ref[group]) & (rows < group_offsets_ref[group + 1])
        # The other rows keep what an earlier visit of this tile wrote there: the output
        # block stays in VMEM while consecutive visits name the same tile.
        out_ref[...] = jnp.where(mine, product.astype(out_ref.dtype), out_ref[...])


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
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(group_offsets, group_ids, m_tile_ids, num_tiles.reshape(1), lhs, rhs)


# 5. ragged_dot.k_axis — a K grid axis, an f32 accumulator: the public gmm ------------

def _check_tiling(name, tiling, dims):
    """The tiling (tm, tk, tn) checked, and shrunk to dims (M, K, N) where longer."""
    if len(tuple(tiling)) != 3 or not all(isinstance(t, int) and t > 0 for t in tiling):
        raise ValueError(f"{name}: tiling={tiling!r} must be three positive ints (tm, tk, tn)")
    tm, tk, tn = tiling
    M, K, N = dims
    if tm % 8:
        raise ValueError(f"{name}: tm={tm} must be a multiple of 8 (the TPU's sublane count)")
    return min(tm, pl.cdiv(M, 8) * 8), min(tk, K), min(tn, N)


def _check_groups(name, group_sizes, num_groups=None):
    if group_sizes.ndim != 1 or group_sizes.dtype != jnp.int32 \
            or group_sizes.shape[0] != (num_groups or group_sizes.shape[0]):
        raise ValueError(f"{name}: group_sizes must be int32 [E{'=' if num_groups else ''}"
                         f"{num_groups or ''}]; got {group_sizes.dtype} {group_sizes.shape}")


def gmm_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref, lhs_ref,
               rhs_ref, out_ref, acc_ref, *, tm, tk, k_size):
    visit, k = pl.program_id(1), pl.program_id(2)

    @pl.when(visit < num_tiles_ref[0])
    def real_visit():
        @pl.when(k == 0)
        def start_tile():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        lhs, rhs = lhs_ref[...], rhs_ref[...]
        if k_size % tk:   # the last K block hangs off the end: zero what lies past K
            valid = k_size - k * tk
            lhs = jnp.where(jax.lax.broadcasted_iota(jnp.int32, lhs.shape, 1) < valid, lhs, 0)
            rhs = jnp.where(jax.lax.broadcasted_iota(jnp.int32, rhs.shape, 0) < valid, rhs, 0)
        acc_ref[...] += jnp.dot(lhs, rhs, preferred_element_type=jnp.float32)

        @pl.when(k == pl.num_programs(2) - 1)
        def store_tile():
            group = group_ids_ref[visit]
            rows = m_tile_ids_ref[visit] * tm + jax.lax.broadcasted_iota(jnp.int32,
                                                                         out_ref.shape, 0)
            mine = (rows >= group_offsets_ref[group]) & (rows < group_offsets_ref[group + 1])
            out_ref[...] = jnp.where(mine, acc_ref[...].astype(out_ref.dtype), out_ref[...])


def gmm(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    """Grouped matmul: out[rows of group e] = lhs[rows of group e] @ rhs[e].

    lhs: [M, K]; rhs: [E, K, N] (one weight matrix per expert); group_sizes: int32 [E],
        summing to M: the rows of lhs, in order, belong to groups 0, 1, ... E - 1.
    tiling: (tm, tk, tn) block sizes; tm a multiple of 8, tk and tn multiples of 128
        (or the whole dim); a tile longer than its dim shrinks to it. M, K and N need
        not divide them.

    Returns [M, N] in lhs's dtype (float32 accumulation inside). An empty group costs
    nothing; a row tile two groups share is computed once per group.
    """
    if lhs.ndim != 2 or rhs.ndim != 3:
        raise ValueError(f"gmm: lhs must be [M, K] and rhs [E, K, N]; got shapes "
                         f"{lhs.shape} and {rhs.shape}")
    (M, K), (E, K_rhs, N) = lhs.shape, rhs.shape
    if K_rhs != K:
        raise ValueError(f"gmm: rhs must be [E, K={K}, N] like lhs [M, K]; got {rhs.shape}")
    if lhs.dtype != rhs.dtype or not jnp.issubdtype(lhs.dtype, jnp.floating):
        raise ValueError(f"gmm: lhs and rhs must share one floating dtype; got {lhs.dtype} "
                         f"and {rhs.dtype}")
    _check_groups("gmm", group_sizes, E)
    tm, tk, tn = _check_tiling("gmm", tiling, (M, K, N))
    group_offsets, group_ids, m_tile_ids, num_tiles = make_group_metadata(group_sizes, M, tm)

    tiles_k = pl.cdiv(K, tk)

    def k_block(visit, k, num_tiles):
        # A padding step stays on the last real step's K block (the metadata already
        # repeats its tile and group there): it fetches nothing new.
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
            scratch_shapes=[pltpu.VMEM((tm, tn), jnp.float32)]),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary")),
    )(group_offsets, group_ids, m_tile_ids, num_tiles.reshape(1), lhs, rhs)


# 6. ragged_dot.tgmm — the weight gradient: a sum over each group's rows ------------

def tgmm_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref, lhs_ref,
                grad_ref, out_ref, acc_ref, *, tm):
    visit = pl.program_id(2)
    num_tiles = num_tiles_ref[0]
    group = group_ids_ref[visit]
    previous = group_ids_ref[jnp.maximum(visit - 1, 0)]
    following = group_ids_ref[jnp.minimum(visit + 1, pl.num_programs(2) - 1)]

    @pl.when((visit == 0) | (previous != group))
    def start_group():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    rows_start, rows_end = group_offsets_ref[group], group_offsets_ref[group + 1]

    @pl.when((visit < num_tiles) & (rows_start < rows_end))
    def accumulate():            # an empty group's visit adds nothing
        first_row = m_tile_ids_ref[visit] * tm
        lhs_rows = first_row + jax.lax.broadcasted_iota(jnp.int32, lhs_ref.shape, 1)
        grad_rows = first_row + jax.lax.broadcasted_iota(jnp.int32, grad_ref.shape, 0)
        # Only this group's rows add: the other group's rows in a shared tile, and the
        # NaN past M, are zeroed on both sides (NaN * 0 is NaN).
        lhs = jnp.where((lhs_rows >= rows_start) & (lhs_rows < rows_end), lhs_ref[...], 0)
        grad = jnp.where((grad_rows >= rows_start) & (grad_rows < rows_end), grad_ref[...], 0)
        acc_ref[...] += jnp.dot(lhs, grad, preferred_element_type=jnp.float32)

    @pl.when((visit == num_tiles - 1) | (following != group))
    def store_group():           # an empty group stores its zeros
        out_ref[...] = acc_ref[...].astype(out_ref.dtype)


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
        return (group_ids[visit], k, n)

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


# 7. ragged_dot.differentiable — differentiable: gmm forward, gmm and tgmm backward ----

def ragged_dot(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    """jax.lax.ragged_dot with Pallas kernels: [M, K], [E, K, N] -> [M, N], differentiable
    in lhs and rhs. tiling (tm, tk, tn) as gmm's."""
    tm, tk, tn = tiling

    @jax.custom_vjp
    def grouped(lhs, rhs, group_sizes):
        return gmm(lhs, rhs, group_sizes, tiling=(tm, tk, tn))

    def grouped_forward(lhs, rhs, group_sizes):
        return grouped(lhs, rhs, group_sizes), (lhs, rhs, group_sizes)

    def grouped_backward(residuals, grad):
        lhs, rhs, group_sizes = residuals
        # d lhs [M, K] = grad [M, N] @ rhs[e]^T for each group's rows: a gmm whose
        # contraction is over N. d rhs[e] [K, N] = lhs[rows of e]^T @ grad[rows of e].
        d_lhs = gmm(grad, jnp.swapaxes(rhs, 1, 2), group_sizes, tiling=(tm, tn, tk))
        d_rhs = tgmm(lhs.T, grad, group_sizes, tiling=(tm, tk, tn))
        return d_lhs, d_rhs, None        # group_sizes (integers) has no gradient

    grouped.defvjp(grouped_forward, grouped_backward)
    return grouped(lhs, rhs, group_sizes)
