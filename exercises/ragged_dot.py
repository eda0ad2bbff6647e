"""Ragged dot: the grouped matmul behind mixture-of-experts layers.

Run `pytest exercises/test_ragged_dot.py` after every edit; add `-k <puzzle>` for
one puzzle and `--hint` when stuck. Replace each `raise NotImplementedError`
with your code; keep the signatures.

The mental model of this chapter
--------------------------------
A mixture-of-experts layer sends each token to one of E experts, each with its own
weight matrix. Sort the tokens by expert and the layer is one ragged matmul: the
rows of lhs [M, K] come in E groups, and group e multiplies rhs[e] [K, N]. The
group sizes come from a router, so they are data, known only when the program
runs: any size, zero included.

    lhs [M, K]        group_sizes = [3, 0, 9, 4]       rhs [E, K, N]
    rows  0- 2  group 0 ────────────────────────────▶ rhs[0]
          (none) group 1 (empty: no work, no fetch)   rhs[1]
    rows  3-11  group 2 ────────────────────────────▶ rhs[2]
    rows 12-15  group 3 ────────────────────────────▶ rhs[3]

jax.lax.ragged_dot computes exactly this. Looping over experts in plain JAX
cannot: a loop needs static sizes, and a dense [E, M, N] product does E times the
work. A kernel can, if its grid follows the groups. Cut M into row tiles of tm rows
(tm = 8 here): a tile may hold rows of several groups, and a group may span several
tiles.

    row tile      0          1
    rows      0 1 2 3 4 5 6 7 | 8 9 a b c d e f
    group     0 0 0 2 2 2 2 2 | 2 2 2 2 3 3 3 3

    visits  (group 0, tile 0) (group 2, tile 0) (group 2, tile 1) (group 3, tile 1)

The grid walks these visits: each one multiplies one row tile by one expert's
weights and keeps only its own rows. The list of visits is metadata computed from
group_sizes in plain JAX (puzzle 2) and handed to the kernel by scalar prefetch
(puzzle 1), so that the index maps can read it: which tile of lhs, which expert of
rhs, which tile of the output. That is JAX's megablox kernels
(jax/experimental/pallas/ops/tpu/megablox), and this chapter builds them:

    1 gather       scalar prefetch: index maps that read a list in SMEM
    2 metadata     the visits, from group_sizes, in plain JAX
    3 aligned      gmm when every group fills whole tiles
    4 masked       any sizes: a shared tile writes only its own rows
    5 k_axis       gmm: a K grid axis, an f32 accumulator; bf16 in, bf16 out
    6 tgmm         the weight gradient: a sum over each group's rows
    7 differentiable  jax.custom_vjp: gmm forward, gmm and tgmm backward

Dimension letters: M rows (tokens), K the contraction dim, N the output dim, E
experts; tm, tk, tn the tile sizes along M, K and N. The tests run your kernels on
CPU in Pallas's TPU interpret mode, which fills fresh buffers with NaN, so a row
never written shows.
"""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


# 1. ragged_dot.gather — scalar prefetch: an index list that index maps read ------

def gather_kernel(tile_ids_ref, x_ref, o_ref):
    """Step i copies the tile of x its index map fetched into output tile i.

    tile_ids_ref [V] int32, in SMEM: the whole list, the same at every step (a
    scalar-prefetch ref comes first in the kernel's arguments, before the inputs).
    x_ref (tm, D): the tile of x that step i's index map named. o_ref (tm, D).

    The kernel is one line, and it does not read tile_ids_ref: the choice of tile
    happened before the step began, when the pipeline copied the block its index
    map named from HBM into VMEM. That is the whole trick of this chapter.
    """
    raise NotImplementedError


def gather_tiles(x, tile_ids, *, tm=8):
    """Tiles of x in the order of a list: x [M, D], tile_ids int32 [V] -> [V * tm, D].

    Output tile i (rows i * tm ... i * tm + tm - 1) is tile tile_ids[i] of x. M is a
    multiple of tm. tile_ids is a traced array: its values exist only when the
    program runs, so Python cannot read them to build BlockSpecs.

    Why scalar prefetch? An index map runs before each grid step to decide which
    block to copy into VMEM. Until now it saw only the grid indices. With
    pltpu.PrefetchScalarGridSpec, some operands are copied into SMEM, the TPU core's
    small scalar memory, before the grid starts, and every index map (and the
    kernel) receives them after the grid indices:

        pl.pallas_call(
            kernel,
            out_shape=...,
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,     # the first operand of the call goes to SMEM
                grid=..., in_specs=[...], out_specs=...),
            compiler_params=...,
        )(tile_ids, x)                     # prefetch operands first, then the inputs

        def x_index_map(i, tile_ids_ref):  # grid index, then the prefetch refs
            ...                            # a ref: read one entry with [...]

    One grid step per output tile, blocks of (tm, D). The test counts the bytes: a
    tile of x is fetched when the list names a different tile than the step before
    (two equal ids in a row cost one fetch), each output tile written once.
    """
    raise NotImplementedError


# 2. ragged_dot.metadata — which (group, row tile) each grid step visits ----------

def make_group_metadata(group_sizes, m, tm, *, visit_empty_groups=False):
    """The visits of a grouped matmul, in plain JAX: four int32 arrays.

    group_sizes int32 [E] (traced) summing to m; m and tm Python ints. With
    tiles_m = ceil(m / tm) row tiles and num_visits = tiles_m + E - 1:

        group_offsets [E + 1]       the row where each group starts, then m
        group_ids     [num_visits]  the group of each visit
        m_tile_ids    [num_visits]  the row tile of each visit
        num_tiles     []            how many visits are real

    The example of the chapter's introduction (tm = 8, sizes [3, 0, 9, 4]):

        group_offsets  [0, 3, 3, 12, 16]
        group_ids      [0, 2, 2, 3, 3]     num_tiles = 4: the last entry is padding
        m_tile_ids     [0, 0, 1, 1, 1]

    The rules, one at a time:

    - A group visits every row tile that holds at least one of its rows, in order:
      from the tile of its first row to the tile of its last. A tile two groups
      share is visited once by each (tile 0 above: groups 0 and 2).
    - An empty group takes no visit, unless visit_empty_groups: then exactly one, on
      the tile where it would start (clamped to the last tile; puzzle 6 needs it).
    - Why num_visits = tiles_m + E - 1? These puzzles give the grid a static length,
      fixed when the program is built, before the sizes are known (a TPU also allows
      a length read at run time, as megablox's num_tiles; a static one keeps every
      array the same shape whatever the sizes): it must hold the most visits any sizes
      can need. Every tile is visited once, plus one more for each group that starts
      inside a tile another group started (or an empty group's visit), and the first
      group cannot: at most E - 1 more.
    - The entries past num_tiles are padding: the grid runs those steps anyway, and
      the kernel will skip them. Make them repeat the last real visit (group and
      tile): a step whose index maps name the blocks already in VMEM fetches
      nothing.

    All of this is array arithmetic, no Python loop over groups (the sizes are
    traced): jnp.cumsum for the offsets; integer division by tm for the tile of a
    row; jnp.repeat(values, counts, total_repeat_length=...) writes each group id
    as many times as it has visits, into an array of static length. For m_tile_ids,
    a visit's tile is its group's first tile plus how many visits of that group came
    before it. Gathering with an index array (x[idx]) is fine in plain JAX.
    """
    raise NotImplementedError


# 3. ragged_dot.aligned — one expert per row tile -----------------------------------

def gmm_aligned_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref,
                       lhs_ref, rhs_ref, out_ref):
    """Grid step (n, visit): one row tile of lhs times one expert's weights.

    The four metadata refs (SMEM) come first: group_offsets_ref [E + 1], group_ids_ref
    and m_tile_ids_ref [num_visits], num_tiles_ref [1]. lhs_ref (tm, K): this visit's
    row tile; rhs_ref (K, tn): its expert's weights, N tile n; out_ref (tm, tn).

    The index maps (gmm_aligned) already fetched the right tile and the right expert,
    so a real visit is matmul.one_block's body: a dot with float32 accumulation
    (preferred_element_type), cast to the output's dtype. What is new: the padding
    steps past num_tiles must do nothing at all. Which visit this is comes from
    pl.program_id; how many are real, from num_tiles_ref (a traced value: use
    pl.when, not a Python if).
    """
    raise NotImplementedError


def gmm_aligned(lhs, rhs, group_sizes, *, tm=128, tn=128):
    """Grouped matmul when every group size is a multiple of tm: lhs [M, K], rhs [E, K, N],
    group_sizes int32 [E] -> [M, N] in lhs's dtype. M % tm == 0, N % tn == 0.

    Every row tile then belongs to exactly one group: no tile is shared, so each
    output tile is written by exactly one visit. (Empty groups may still be there:
    0 is a multiple of tm.)

        grid (N // tn, num_visits)      num_visits = M // tm + E - 1, static
        lhs  blocks (tm, K)             the row tile this visit names
        rhs  blocks (None, K, tn)       this visit's expert (the None dim squeezed),
                                        N tile n
        out  blocks (tm, tn)

    Compute the metadata with your make_group_metadata and pass all four arrays as
    scalar-prefetch operands (num_tiles reshaped to [1]: SMEM holds arrays). Every
    index map receives (n, visit, group_offsets, group_ids, m_tile_ids, num_tiles) and
    reads the entry of this visit. Mark the N axis "parallel" and the visit axis
    "arbitrary" (consecutive visits may write one output tile: puzzle 4).

    The test counts the work (only the real visits compute) and the bytes: each row
    tile and each used expert fetched once per N tile, the padding steps nothing.
    """
    raise NotImplementedError


# 4. ragged_dot.masked — a tile two groups share writes only its own rows -----------

def gmm_masked_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref,
                      lhs_ref, rhs_ref, out_ref, *, tm):
    """gmm_aligned_kernel for any group sizes: a visit writes only its group's rows.

    Take tile 0 of the introduction, visited by group 0 (rows 0-2) and then by group
    2 (rows 3-7). The first visit computes the whole tile with rhs[0], but only rows
    0-2 are right; the second computes it again with rhs[2], and only rows 3-7 are
    right. If each visit stored the whole tile, the second would overwrite rows 0-2
    with group 2's answer.

        visit (0, tile 0)   rows 0 1 2 | 3 4 5 6 7    store rows 0-2, keep the rest
        visit (2, tile 0)   rows 0 1 2 | 3 4 5 6 7    keep rows 0-2, store rows 3-7

    "Keep the rest" works because consecutive visits of one tile name the same output
    block: it stays in VMEM between them (it goes back to HBM only when the index
    changes), so out_ref[...] still holds what the earlier visit wrote.

    So build a mask [tm, tn]: which rows of this tile belong to this visit's group.
    The row of each element is the tile's first row plus jax.lax.broadcasted_iota
    along axis 0; the group's rows run from its offset to the next group's offset
    (both in group_offsets_ref). Then store with jnp.where. tm is bound with
    functools.partial.

    Rows past M (the last tile hangs off the end) belong to no group; they are never
    written back to HBM anyway.
    """
    raise NotImplementedError


def gmm_masked(lhs, rhs, group_sizes, *, tm=128, tn=128):
    """Grouped matmul for any group sizes: lhs [M, K], rhs [E, K, N] -> [M, N]. N % tn == 0;
    M need not be a multiple of tm (tm a multiple of 8).

    gmm_aligned's grid and BlockSpecs, with num_visits = ceil(M / tm) + E - 1 and the
    masked kernel: nothing else changes. A group smaller than a tile, a group that
    starts mid-tile, an empty group: the metadata already says which visits to make
    (none for an empty group, so its expert is never fetched), and the mask which
    rows each visit owns.
    """
    raise NotImplementedError


# 5. ragged_dot.k_axis — a K grid axis, an f32 accumulator: the public gmm ------------

def gmm_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref, lhs_ref,
               rhs_ref, out_ref, acc_ref, *, tm, tk, k_size):
    """gmm_masked_kernel with the contraction cut into K blocks: grid step (n, visit, k).

    lhs_ref (tm, tk), rhs_ref (tk, tn), out_ref (tm, tn); acc_ref (tm, tn) float32 VMEM
    scratch. tm, tk and k_size (= K) bound with functools.partial.

    matmul.k_accumulate's phases, once per visit:

        k == 0         start   zero the accumulator (a new visit: a new tile or a
                               new group, so nothing carries over)
        every k        add     this K block's product, in float32
        last k         store   the masked store of puzzle 4, cast to out's dtype

    and all of it only on a real visit (past num_tiles: nothing). Why the f32
    scratch and not out_ref? A bf16 output would round every partial sum.

    K need not be a multiple of tk: the last K block hangs off the end of lhs and
    rhs, and what lies past K is not zeros (in interpret mode, NaN; on a TPU,
    whatever is in memory). A NaN times 0 is still NaN, so zero both sides' entries
    past K (jnp.where on an iota) before the dot. k_size % tk is static: a K that
    divides needs no mask.
    """
    raise NotImplementedError


def gmm(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    """Grouped matmul: lhs [M, K], rhs [E, K, N], group_sizes int32 [E] -> [M, N].

    tiling (tm, tk, tn): tm a multiple of 8, tk and tn multiples of 128 or the whole
    dim; a tile longer than its dim shrinks to it (tm to M rounded up to 8). M, K and
    N need not divide them. The output has lhs's dtype, accumulated in float32.

    1. Check the arguments up front, each ValueError naming its argument: lhs 2-D and
       rhs 3-D with the same K, one floating dtype, group_sizes int32 [E], the tiling.
    2. The grid (ceil(N / tn), num_visits, ceil(K / tk)): the K axis last, as in
       matmul, so that a visit's K steps run back to back into one accumulator.
       Semantics ("parallel", "arbitrary", "arbitrary").
    3. The index maps of puzzle 4, with the K block added. One trap: on a padding
       step the metadata repeats the last real visit, but the K index keeps cycling
       0, 1, ... so the blocks would be fetched again, for nothing. Make the padding
       steps name the same K block as the last real step (jnp.where is fine in an
       index map).

    The test counts the work (real visits only) and the bytes (each real visit's
    blocks; the padding steps none).
    """
    raise NotImplementedError


# 6. ragged_dot.tgmm — the weight gradient: a sum over each group's rows ------------

def tgmm_kernel(group_offsets_ref, group_ids_ref, m_tile_ids_ref, num_tiles_ref, lhs_ref,
                grad_ref, out_ref, acc_ref, *, tm):
    """Grid step (n, k, visit): add this visit's rows to its group's [tk, tn] sum.

    lhs_ref (tk, tm): columns of lhs [K, M] for this visit's row tile; grad_ref (tm, tn);
    out_ref (tk, tn): the block of out[group] for this visit's group; acc_ref (tk, tn)
    float32 scratch. tm bound with functools.partial.

    gmm summed over K for each row; tgmm sums over rows, for each group: out[e] =
    lhs[:, rows of e] @ grad[rows of e]. Visits are the reduction axis now, last in
    the grid, and a group's visits come one after the other, so:

        first visit of a group     start   zero the accumulator
        each visit                 add     lhs_tile @ grad_tile over this group's
                                           rows only: mask both inputs (the rows of
                                           another group in the tile, and the NaN
                                           past M, must add nothing)
        last visit of a group      store   the accumulator into out_ref

    A visit's group is group_ids_ref[visit]; comparing with the previous and the next
    visit's group tells first and last (careful at both ends of the grid). A padding
    step past num_tiles adds nothing, and is not the last visit of its group either.

    An empty group has one visit (visit_empty_groups=True): it starts, adds nothing
    (its rows are none: skip the dot) and stores zeros. Its output block exists in HBM
    whether or not you visit it; only a visit writes it.
    """
    raise NotImplementedError


def tgmm(lhs, grad, group_sizes, *, tiling=(128, 128, 128)):
    """Transposed grouped matmul: lhs [K, M], grad [M, N], group_sizes int32 [E] -> [E, K, N].

    out[e] = lhs[:, rows of group e] @ grad[rows of group e]: with lhs = x.T and grad the
    cotangent of gmm(x, w)'s output, that is d w[e]. A group with no rows gets zeros.

    tiling (tm, tk, tn) as gmm's (tm is lhs's last block dim here: a multiple of 128,
    or M itself). Checks up front as in gmm.

        metadata   make_group_metadata(..., visit_empty_groups=True)
        grid       (ceil(N / tn), ceil(K / tk), num_visits)
        lhs        blocks (tk, tm): K block k, this visit's row tile
        grad       blocks (tm, tn)
        out        blocks (None, tk, tn): this visit's group, K block k, N block n
        scratch    (tk, tn) float32

    Semantics: only the visit axis reduces into one block; the other two may be
    "parallel". No K mask is needed here: rows of lhs past K only reach rows of the
    output past K, which are never written back.
    """
    raise NotImplementedError


# 7. ragged_dot.differentiable — differentiable: gmm forward, gmm and tgmm backward ----

def ragged_dot(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    """jax.lax.ragged_dot with your kernels: lhs [M, K], rhs [E, K, N] -> [M, N],
    differentiable in lhs and rhs (group_sizes is integers: no gradient).

    jax.grad cannot see inside a pallas_call, so tell it the backward, as in
    flash.backward, with jax.custom_vjp: a forward that returns the output and the
    residuals, and a backward that maps the output's cotangent grad [M, N] to one
    cotangent per input. For out[rows of e] = lhs[rows of e] @ rhs[e]:

        d lhs[rows of e] = grad[rows of e] @ rhs[e].T   a gmm, with each expert's
                                                        weights transposed: [E, N, K]
        d rhs[e] = lhs[rows of e].T @ grad[rows of e]   a tgmm of lhs.T [K, M]

    Three kernels in all: gmm forward; gmm and tgmm backward. Transposing rhs and lhs
    in plain JAX is allowed here (megablox avoids the copy of rhs with a
    transpose_rhs flag; a refinement for later). Mind the tiling of the d lhs gmm:
    its contraction is over N and its output columns are K, so which of tk and tn
    goes where? The values come out right either way, but tiles sized for one dim
    then cut the other, and the test holds each of the three kernels to the grid
    and blocks of its own puzzle. The backward returns None for group_sizes.

    Pass group_sizes as an argument of the custom_vjp function rather than
    closing over it: a closed-over traced value works in a plain jax.grad, but
    breaks under jit or vmap of the whole thing (the tiling, plain Python ints, may
    be closed over).
    """
    raise NotImplementedError
