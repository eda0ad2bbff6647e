"""Splash attention: block-sparse masks, and a kernel that never touches a masked block.

Run `pytest exercises/test_splash.py` after every edit; add `-k <puzzle>` for
one puzzle and `--hint` when stuck. Replace each `raise NotImplementedError`
with your code; keep the signatures.

The mental model of this chapter
--------------------------------
flash.causal skipped the tiles above the diagonal with a rule written into the
kernel. Real models mask in many more ways: a sliding window (each query sees
only the last W keys), prefix-LM (a prompt seen in full, the rest causally),
documents packed into one sequence (a query sees only its own document). A
mask is a boolean [T, S]: mask[t, s] says whether query t sees key s. Cut it
into (block_q, block_kv) tiles, the tiles a flash kernel works on, and every
tile is one of three kinds. A causal mask with a window of 5 keys, T = S = 12,
in 4 x 4 tiles:

        key s → 0123 4567 89ab                        kv block j →  0  1  2
    query t  0  ■··· ···· ····                     q block i = 0    ◩  ·  ·
             1  ■■·· ···· ····                                 1    ◩  ◩  ·
             2  ■■■· ···· ····                                 2    ◩  ◩  ◩
             3  ■■■■ ···· ····
             4  ■■■■ ■··· ····          ■ full     every score visible: compute
             5  ■■■■ ■■·· ····          ◩ partial  some visible: compute, then mask
             6  ·■■■ ■■■· ····          · empty    nothing visible: skip it all,
             7  ··■■ ■■■■ ····                     not even fetched into VMEM
             8  ···■ ■■■■ ■···
             9  ···· ■■■■ ■■··
             a  ···· ·■■■ ■■■·
             b  ···· ··■■ ■■■■

At T = S = 8192 in 512-blocks, a causal mask leaves 136 of 256 tiles; a causal
window of 1024 keys leaves 45, and eight packed documents of 1024 tokens 24.
Splash attention (JAX ships it: jax.experimental.pallas.ops.tpu.splash_attention)
turns that into speed in three steps, and so does this chapter:

1. The mask is known before the kernel is built: it belongs to the model, not
   to the data. So the tiles are classified once, in NumPy (puzzle 1), and the
   kernel reads each tile's category from a small table in SMEM (puzzle 2).
2. For each q block, a list of the kv blocks it must visit, padded to the
   longest list (puzzle 4). The grid walks the lists instead of every kv block,
   and the K/V index maps read them, so an empty tile costs no grid step and
   no copy (puzzle 5).
3. Only partial tiles need their mask, and most of them look alike (every
   diagonal tile of a causal mask is the same triangle): HBM keeps one copy of
   each distinct pattern (puzzle 6).

Puzzle 3 builds the masks of real models; puzzle 7 puts it all together as
`splash_attention(q, k, v, mask, *, sm_scale, block_q, block_kv)`, the
chapter's public API: a mask shared by every head or one per head,
grouped-query heads, any lengths.

Dimension letters: B batch, N query heads, K K/V heads (K divides N), T queries,
S keys, H head dim; block_q and block_kv the block sizes along T and S, so that
there are nq = T / block_q q blocks and nkv = S / block_kv kv blocks. Scores and
softmax statistics are float32 whatever the input dtype. The tests run your
kernels on CPU in Pallas's TPU interpret mode, which fills fresh buffers with
NaN, so a missing initialisation shows.
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# The score given to a key a query must not see. exp(MASK_VALUE - m) is 0 like
# exp(-inf), but a row whose keys are all masked stays finite (-inf - -inf is NaN).
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)

# Block categories.
EMPTY, PARTIAL, FULL = 0, 1, 2


def online_softmax_step(m, l, acc, s, v, visible=None):
    """flash.online's step, with a mask: fold a chunk of scores s [R, C] and values
    v [C, H] into the running max m [R, 1], sum l [R, 1] and accumulator acc [R, H].
    You write it in puzzle 2 (splash.skip_empty); puzzles 2, 4 and 7 use it.

    Start from your own online_softmax_step of exercises/flash.py (puzzle flash.online):
    copy it here, then add `visible`.

    visible [R, C] (bool, optional): which scores count. A hidden score adds nothing,
    not even to a row that has no visible key in this chunk.

    flash.causal hid scores by giving them MASK_VALUE, and for a row with at least one
    visible key that is enough: exp(MASK_VALUE - m) is 0. But a row whose keys are all
    hidden has m = MASK_VALUE, and each hidden key adds exp(0) = 1: the row would get
    the mean of v. So with visible given, a hidden score must add exactly 0 to l and to
    acc, and such a row ends with l == 0 (puzzle 7 needs that). Called without visible
    (a block with every key visible), it is flash's step: no mask, no jnp.where.
    """
    raise NotImplementedError


# 1. splash.categories — empty, partial or full: the mask seen block by block ---

def block_categories(mask, block_q, block_kv):
    """The category of every tile of a mask: int8 [..., T/block_q, S/block_kv].

    mask [..., T, S] (NumPy bool): mask[..., t, s] says whether query t sees key s;
    leading dims (one mask per head, [N, T, S]) are kept. block_q divides T and
    block_kv divides S. Each entry of the result says what the kernel must do with
    tile (i, j), rows i * block_q ... and columns j * block_kv ...:

        EMPTY   = 0   no visible key: skip it
        PARTIAL = 1   some keys visible: compute it and apply the mask
        FULL    = 2   every key visible: compute it, no mask needed

    The module docstring's picture, as a table: [[1, 0, 0], [1, 1, 0], [1, 1, 1]].

    This is NumPy on a concrete mask, run before any kernel exists, so use whole-
    array operations, not a Python loop over tiles. The trick is a reshape that
    cuts an array into tiles: a [T, S] array reshaped to [T/block_q, block_q,
    S/block_kv, block_kv] puts element (t, s) at

        (t // block_q, t % block_q, s // block_kv, s % block_kv)
          tile row      row inside    tile column  column inside

    so reducing over the two "inside" axes summarises each tile. (Reshaping to
    [T/block_q, S/block_kv, block_q, block_kv] instead does not cut tiles: a
    reshape keeps memory order, and consecutive elements of a row stay together.)
    np.any and np.all take a tuple of axes; negative axes keep leading head dims
    out of the way. Return np.int8, a byte per tile; puzzle 2 widens them to
    int32 when it hands them to the kernel.
    """
    raise NotImplementedError


# 2. splash.skip_empty — flash attention that skips empty blocks --------------

def block_mask_kernel(categories_ref, q_ref, k_ref, v_ref, mask_ref, o_ref, m_scratch,
                      l_scratch, acc_scratch, *, sm_scale):
    """flash.grid's kernel, told by a table which tiles to compute and which to mask.

    Grid step (b, n, i, kv). categories_ref [nq, nkv] int32 in SMEM: the whole table
    of block_categories, the same for every step. q_ref (block_q, H), k_ref and v_ref
    (block_kv, H), mask_ref (block_q, block_kv) bool: this step's tile of the mask.
    o_ref (block_q, H); m_scratch, l_scratch (block_q, 1) and acc_scratch
    (block_q, H): float32 VMEM scratch, as in flash.grid.

    New here: a scalar-prefetch operand. It lives in SMEM, the TPU core's scalar
    memory, so the kernel can read single entries of it: categories_ref[i, kv] is
    this tile's category, a traced int32 (known only when the kernel runs, so a
    Python `if` cannot look at it; pl.when can). Scalar-prefetch refs come first
    in the kernel's arguments, before the inputs.

    The phases, along the kv axis (grid axis 3):

        first kv step       start     the running state's starting values
        category FULL       fold      as flash.grid: score, online_softmax_step
        category PARTIAL    fold      the same, with this tile of the mask
        category EMPTY      -         nothing: no dot, no exp
        last kv step        finish    normalise and store

    online_softmax_step (above) takes the mask as `visible`; leave it out for a
    full tile. Why not mask every tile and be done? A full tile's mask is all True:
    reading it and selecting with it is work for nothing, on most of the tiles.
    Start and finish stay outside the conditions: the last kv step may be empty.
    """
    raise NotImplementedError


def flash_block_mask(q, k, v, mask, *, sm_scale=None, block_q=128, block_kv=128):
    """Attention under a block-sparse mask: q [B, N, T, H], k, v [B, N, S, H] -> [B, N, T, H].

    mask [T, S]: NumPy bool, shared by every head (the tests pass it as it is, not
    traced). T % block_q == 0 and S % block_kv == 0; sm_scale=None means 1 / sqrt(H).

    Everything about the mask is known now, before the kernel exists: compute the
    categories with block_categories, in NumPy, and hand them to the kernel as a
    scalar-prefetch operand, as int32: SMEM is made of 32-bit words, and JAX's
    own kernels keep every scalar-prefetch table in int32 (interpret mode and the
    lowering check accept int8 too, a TPU may not). The grid and the q,
    K, V and o BlockSpecs are flash.grid's; the mask is one more input, in
    (block_q, block_kv) tiles, the tile of step (b, n, i, kv) being tile (i, kv).

    New here:

        pl.pallas_call(
            kernel,
            out_shape=...,
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,   # the first operand of the call goes to SMEM
                grid=..., in_specs=[...], out_specs=..., scratch_shapes=[...]),
            compiler_params=...,
        )(categories, q, k, v, mask)     # prefetch operands first, then the inputs

        # With scalar prefetch, every index map receives the prefetch refs after
        # the grid indices: def q_index_map(b, n, i, kv, categories_ref): ...
        # (this puzzle's index maps do not read it; puzzle 5's will)

    The test counts the dots your kernel executes: those of the non-empty tiles,
    no more. What it does not count yet: the K and V index maps still name every
    kv block, so empty tiles are still copied into VMEM. Puzzles 4 and 5 stop that.
    """
    raise NotImplementedError


# 3. splash.families — masks as functions of (row, col) ------------------------

def make_mask(T, S, *, causal=False, window=None, prefix=0, segments=None):
    """The masks real models use, as bool [T, S]: query t sees key s where True.

    Each option is a rule on (t, s); the rules given all hold at once (AND):

        causal=True        s <= t: a query sees itself and the keys before it
                           (top-left, as in flash, also when T != S)
        window=(L, R)      t - L <= s <= t + R: L keys to the left, R to the right;
                           None on a side means no limit on that side
        prefix=P           with causal=True only: keys s < P (the prompt) are seen
                           by every query, the rest causally (prefix-LM); it widens
                           the causal rule, it is not one more AND
        segments=(q_ids, kv_ids)
                           q_ids [T], kv_ids [S]: documents packed into one
                           sequence; a query sees only keys of its own document

    T = S = 6:

        causal      window=(2, 1)   causal,           causal,      segments
                                    window=(2, None)  prefix=3     (0 0 1 1 1 2)
        ■·····      ■■····          ■·····            ■■■···       ■■····
        ■■····      ■■■···          ■■····            ■■■···       ■■····
        ■■■···      ■■■■··          ■■■···            ■■■···       ··■■■·
        ■■■■··      ·■■■■·          ·■■■··            ■■■■··       ··■■■·
        ■■■■■·      ··■■■■          ··■■■·            ■■■■■·       ··■■■·
        ■■■■■■      ···■■■          ···■■■            ■■■■■■       ·····■

    causal with window=(W, None) is a sliding window: each query sees itself and
    the W keys before it.

    Think in broadcasting: np.arange(T) as a column [T, 1] and np.arange(S) as a
    row [1, S] make every rule one comparison that broadcasts to [T, S]; the ids
    of segments broadcast the same way. Start from all True and narrow it (&=).
    prefix without causal means nothing: raise a ValueError that says so; so do
    segment ids whose lengths are not T and S.
    """
    raise NotImplementedError


# 4. splash.compact — per q block, the list of kv blocks to visit ---------------

def fill_ahead(values, needed):
    """PROVIDED: values [..., R, C] where needed; every other entry takes the value of
    the next needed entry of its table [R, C] in row-major order (the grid's order),
    the last needed entry's after it, and 0 in a table where nothing is needed.

    For each leading index separately (one table per head):

        values  [[5, 7, .], [., ., .], [2, ., .]]      . = not needed
        result  [[5, 7, 2], [2, 2, 2], [2, 2, 2]]

    Why "the next one"? The pipeline copies a block whenever a step's block index
    differs from the previous step's. A step with nothing to do that names the block
    the next useful step needs turns that copy into a prefetch: it happens early,
    and when the useful step comes, its block is already in VMEM.
    """
    values, needed = np.asarray(values), np.asarray(needed, dtype=bool)
    *tables, rows, width = values.shape
    filled = np.zeros_like(values)
    for table in np.ndindex(*tables):
        flat, keep = values[table].reshape(-1), needed[table].reshape(-1)
        at = np.flatnonzero(keep)
        if at.size:
            following = np.minimum(np.searchsorted(at, np.arange(flat.size)), at.size - 1)
            filled[table] = flat[at[following]].reshape(rows, width)
    return filled


def compact(categories):
    """Per q block, the list of kv blocks to visit: (data_next, block_mask).

    categories [..., nq, nkv] (block_categories' table; leading dims, one table per
    head, are kept). Returns two int32 arrays [..., nq, width], where width is the
    length of the longest list (at least 1):

        data_next[..., i, j]    the kv block that step j of q block i visits
        block_mask[..., i, j]   its category: FULL or PARTIAL, and EMPTY (0) for
                                the steps past the end of a shorter list

    Why? In puzzle 2 the grid had a step for every kv block: an empty tile still
    cost a grid step, and its K/V blocks were still copied into VMEM, since the
    index maps named them. With these tables the grid's last axis has width steps,
    the K/V index maps read data_next (puzzle 5), and an empty tile costs nothing.

        categories                   data_next            block_mask
             j → 0  1  2  3  4            j → 0  1  2          0  1  2
        i = 0    2  1  0  0  0       i = 0    0  1  1*    i = 0  2  1  0
            1    0  2  2  1  0           1    1  2  3        1  2  2  1
            2    0  0  0  0  0           2    3* 3* 3*       2  0  0  0
            3    0  0  0  1  2           3    3  4  4*       3  1  2  0

    A row shorter than width is padded (*), and the padding names a kv block too:
    every step of the grid fetches the block its index map names. Name the one the
    next visit needs (row 0's padding names block 1, row 1's first visit) and the
    fetch is a prefetch; after the last visit, repeat it and nothing moves.
    fill_ahead (given, above) does exactly that, given which steps are real
    visits. np.flatnonzero lists the non-empty kv blocks of one row.
    """
    raise NotImplementedError


# 5. splash.sparse_grid — a grid as long as the longest list, index maps that read it

def splash_kernel(data_next_ref, block_mask_ref, mask_next_ref, q_ref, k_ref, v_ref, mask_ref,
                  o_ref, m_scratch, l_scratch, acc_scratch, *, sm_scale):
    """block_mask_kernel again, now walking a list: grid step (b, n, i, j) is the j-th
    visit of q block i, for query head n.

    Three scalar-prefetch refs come first, the tables [N, nq, width] int32 (one per
    query head): data_next_ref, block_mask_ref and mask_next_ref. q_ref (block_q, H);
    k_ref, v_ref (block_kv, H): the kv block that data_next names for this step,
    fetched by the index maps; mask_ref (block_q, block_kv): the stored mask block
    that mask_next names. Output and scratch as before.

    Almost nothing changes from block_mask_kernel, and that is the point: the index
    maps (splash_call) do the new work. The kernel never needs to know which kv
    block it has; it needs the step's category, from block_mask_ref, for this
    query head and this step. The data_next and mask_next refs are passed to the
    kernel too (every prefetch ref is); it just does not read them.

    The phases run along the list, grid axis 3: start at its first step, finish at
    its last step, and a padding step (category EMPTY) does nothing.
    """
    raise NotImplementedError


def splash_call(q, k, v, data_next, block_mask, mask_next, mask_blocks, *, sm_scale=None):
    """Attention that follows the tables: q [B, N, T, H], k, v [B, K, S, H] -> [B, N, T, H].

    data_next, block_mask, mask_next [N, nq, width] int32, one table per query head:
    the kv block, the category and the stored mask block of each step (mask_next
    matters on partial steps; elsewhere it names the next partial step's block, so
    that nothing is fetched in vain). mask_blocks [P, block_q, block_kv] bool: the
    stored mask blocks; block_q and block_kv are read from its shape. K divides N:
    query head n reads K/V head n // (N // K), as in flash.gqa.

    The grid is (B, N, nq, width): the last axis walks the lists. The trick of the
    chapter is in the index maps. With scalar prefetch, an index map receives the
    grid indices and then the prefetch refs, and it may read them:

        def k_index_map(b, n, i, j, data_next_ref, block_mask_ref, mask_next_ref):
            ...                      # data_next_ref[n, i, j] is a block index

    So the K and V BlockSpecs fetch exactly the kv blocks on the list, and the mask
    BlockSpec ((None, block_q, block_kv) blocks of mask_blocks) fetches the stored
    block mask_next names. q and o are indexed as in flash.grid (i, not j).

    The test counts the bytes: K and V of the visited blocks, each copied once where
    the tables name it (padding steps name a block that is already there or needed
    next); the mask only where a step changes stored block; q read and o written once.
    pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=3, ...) takes the three
    tables, in the order of the kernel's arguments. sm_scale=None means 1 / sqrt(H).
    """
    raise NotImplementedError


# 6. splash.dedup — one stored block per partial pattern ------------------------

def dedup_blocks(mask, block_q, block_kv):
    """The mask blocks a kernel needs, each distinct pattern stored once.

    mask [..., T, S] (NumPy bool; leading dims, one mask per head, allowed). Returns
    (mask_blocks, block_index):

        mask_blocks [P, block_q, block_kv] bool   the distinct patterns of the
                                                  partial tiles, in the order they
                                                  first appear (row-major over
                                                  [..., nq, nkv])
        block_index [..., nq, nkv] int32          for a partial tile, where its
                                                  pattern sits in mask_blocks;
                                                  0 for the other tiles

    Why? Only partial tiles need their mask (an empty tile is skipped, a full one
    needs none), and storing every tile would be T x S bytes per head: 1 GiB at
    T = S = 32768. But partial tiles repeat. With block_q == block_kv, every
    diagonal tile of a causal mask is the same triangle, so the whole causal mask
    is one stored block:

        causal, 3 x 3 tiles      categories      block_index     mask_blocks
        ◩ · ·                    1 0 0           0 0 0           [ triangle ]
        ■ ◩ ·                    2 1 0           0 0 0
        ■ ■ ◩                    2 2 1           0 0 0

    A sliding window's edges repeat the same way; documents packed in a sequence
    repeat their corners. When no tile is partial, store one all-False block
    anyway (a kernel operand cannot be empty); nothing will read it.

    Cut the mask into tiles with puzzle 1's reshape, and keep them this time, laid
    out so that tile (i, j) sits at [..., i, j, :, :]. block_categories tells which
    tiles are partial; store them in row-major order over [..., nq, nkv]. A pattern
    is a small bool array, which a dict cannot take as a key as it is, but its bytes
    (pattern.tobytes()) it can: then a dict can tell you whether you stored a pattern
    before, and where.
    """
    raise NotImplementedError


# 7. splash.multihead — the public API ---------------------------------------------

def splash_attention(q, k, v, mask, *, sm_scale=None, block_q=128, block_kv=128):
    """Block-sparse attention: q [B, N, T, H], k, v [B, K, S, H] (K divides N) -> [B, N, T, H].

    mask: concrete booleans, [T, S] for every head or [N, T, S] per query head (a
    NumPy array or a concrete jax.Array; never traced). Any T, S >= 1. sm_scale=None
    means 1 / sqrt(H). block_q, block_kv: positive multiples of 8; a block longer
    than its (rounded-up) sequence shrinks to it. Returns q's dtype. A query that
    sees no key outputs 0.

    The pieces are all here; this puzzle puts them together, with four new things:

    1. Check the arguments up front, each ValueError naming its argument: 4-D q, k, v
       of one floating dtype, k and v of one shape, N a multiple of K, the mask's
       shape and dtype, the blocks.
    2. Any lengths. Round T and S up to whole blocks. Padding is only more mask: pad
       the mask with False (np.pad), so padded keys are hidden from every query and
       padded queries see nothing; pad q, k, v with zeros (jnp.pad) and cut the
       output back to T rows.
    3. A mask per head. Build the tables for each mask head (block_categories,
       compact and dedup_blocks all keep leading dims), then give each query head
       its table: for a shared mask, the same table N times (np.broadcast_to).
       mask_next, on a partial step, is the stored block of the tile the step
       visits: block_index looked up at the step's kv block (np.take_along_axis
       gathers along an axis); on the other steps, fill_ahead.
    4. Queries that see no key: padded rows, a query whose document has no key
       here, a row masked off. online_softmax_step leaves them with l == 0 and
       acc == 0; then 0 / 0 is NaN. Give them 0 in splash_kernel's finish.

    Then splash_call does the rest. The test checks the values, the work (the
    visited tiles' dots only), the K/V bytes (the visited blocks, once per query
    head) and the size of the stored mask (the distinct partial patterns).
    """
    raise NotImplementedError
