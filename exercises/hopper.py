"""Hopper: Pallas on NVIDIA GPUs with Mosaic GPU.

Run `pytest exercises/test_hopper.py` after every edit; add `-k <puzzle>` for one
puzzle and `--hint` when stuck. Replace each `raise NotImplementedError` with your
code; keep the signatures.

The mental model of this chapter
--------------------------------
Every chapter so far wrote TPU kernels. This one writes kernels for an NVIDIA
Hopper GPU (H100, H200) with Mosaic GPU, the GPU backend of Pallas. The ideas carry
over (blocks, memory close to the compute, copies that overlap the work); the
hardware words change:

    GMEM   the GPU's HBM: tens of GiB, slow. A plgpu.kernel gets its inputs and
           outputs here, as refs.
    SMEM   shared memory: a few hundred KiB per SM (streaming multiprocessor),
           next to the compute; the kernel allocates it (scratch_types).
    registers  where values live while you compute on them: x = tile[...] loads
           into registers, tile[...] = x stores back.

A GPU runs a grid of blocks (CUDA "thread blocks"), each on one SM. A CUDA
programmer writes one of the block's 128-lane threads; in Mosaic GPU you write one
*Pallas thread*, which is a whole warpgroup (4 warps of 32 lanes): `tile[...]` is
one array that the warpgroup's 128 lanes hold together, and every operation works
on whole arrays, as in a TPU kernel. (Puzzle 6 puts two Pallas threads in a block.)

    plgpu.kernel(body, out_type=..., grid=(4,), grid_names=("blocks",))(x)

             block 0        block 1        block 2        block 3      (one SM each)
    x_ref ┌────────────┬─────────────┬─────────────┬─────────────┐   in GMEM
          └────────────┴─────────────┴─────────────┴─────────────┘
    lax.axis_index("blocks") tells a block which one it is.

Hopper adds units that work on their own, asynchronously, while the warpgroup
goes on: the TMA engine copies tiles between GMEM and SMEM (puzzle 2), the tensor
core multiplies tiles that sit in SMEM (puzzle 4). Working with them takes two
kinds of synchronisation, and the kit checks both:

* a barrier (plgpu.Barrier) says "this copy landed" (or "that warpgroup is done"):
  reading a TMA copy's destination before plgpu.barrier_wait is a race;
* plgpu.commit_smem() makes your plain stores to SMEM visible to those units (and
  orders your plain reads before a copy that overwrites the buffer).

On this machine your kernels run in JAX's GPU interpret mode: SMEM, barriers, TMA
and the tensor core are simulated on the CPU, a race is raised and named with your
lines, fresh memory holds NaN. Interpret mode cannot see everything a Hopper cares
about (the layout the tensor core reads, a wgmma still running), so the tests check
those from your program. On a machine with a Hopper, `gpu`-marked tests run the same
kernels compiled. Two things interpret mode needs from you: name grid axes and use
lax.axis_index (pl.program_id is 0 in every block there), and keep block sizes
dividing the arrays (this chapter does no masking; the functions raise ValueError
naming the argument otherwise).

Dimension letters: M rows and D columns of an array, L slabs of a stack; M, K, N of
a matmul [M, K] @ [K, N]; for attention B batch, N query heads, K K/V heads, T
queries, S keys, H head dim.

The public functions of this chapter are `matmul(a, b, *, tile_m, tile_n, tile_k,
max_concurrent_steps)` (puzzle 5) and `attention(q, k, v, *, causal, block_q,
block_kv)` (puzzle 7).
"""
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu


def _check_divides(name, argument, block, size, dim):
    """PROVIDED: raises a ValueError naming the argument unless block is positive and
    divides the dim it tiles (this chapter does no masking)."""
    if block < 1 or size % block:
        raise ValueError(f"{name}: {argument}={block} must divide {dim}={size}")


def _check_16_bit(name, *arrays):
    """PROVIDED: raises a ValueError unless every array is float16 or bfloat16 (what
    the tensor core multiplies here)."""
    for array in arrays:
        if jnp.dtype(array.dtype) not in (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16)):
            raise ValueError(f"{name}: the tensor core takes float16 or bfloat16, got "
                             f"{array.dtype}")


# 1. hopper.first_kernel — a grid of blocks, GMEM, SMEM and registers -----------

def add_one_kernel(x_ref, o_ref, tile, *, block_rows):
    """Block b adds one to its block_rows rows of x, through an SMEM tile.

    x_ref, o_ref [M, D]: the whole arrays, in GMEM. tile (block_rows, D): this
    block's SMEM scratch.

        x_ref (GMEM)  rows of block b ──load──▶ registers (+ 1) ──store──▶ tile (SMEM)
        o_ref (GMEM)  rows of block b ◀──store── registers ◀──load──────── tile

    Why go through SMEM at all? On a Hopper every tile a kernel multiplies or
    copies asynchronously lives in SMEM (the next puzzles); here you meet it with
    plain loads and stores.

    New here:

        lax.axis_index("blocks")       # which block of the grid this is (0, 1, ...):
                                       # the axis named in the call's grid_names
        pl.ds(start, size)             # `size` rows from row `start` (start may be
                                       # traced, size a Python int): x_ref[pl.ds(...)]
        tile[...] = value; tile[...]   # store into / load from SMEM, as with any ref

    A load gives one (block_rows, D) array held by the warpgroup's 128 lanes
    together: you never see a single lane.
    """
    raise NotImplementedError


def add_one(x, *, block_rows=64):
    """x + 1 for x [M, D], one block of the GPU's grid per block_rows rows.

    block_rows must divide M (ValueError naming block_rows otherwise: use
    _check_divides("add_one", "block_rows", block_rows, M, "M")).

    New here, the call:

        plgpu.kernel(
            kernel,                                 # gets inputs, outputs, scratch
            out_type=jax.ShapeDtypeStruct(shape, dtype),
            grid=(blocks,), grid_names=("blocks",), # the CUDA grid, axes named
            scratch_types=[plgpu.SMEM(shape, dtype)],   # SMEM of the kernel's own
        )(x)

    No BlockSpecs: a plgpu.kernel gets whole arrays in GMEM and each block picks its
    part itself. Bind block_rows into the kernel with functools.partial.
    """
    raise NotImplementedError


# 2. hopper.tma — asynchronous copies: GMEM -> SMEM -> GMEM by the TMA engine ---

def add_one_tma_kernel(x_ref, o_ref, tile, landed, *, block_rows):
    """Puzzle 1's x + 1, with the data moved by the TMA engine instead of the lanes.

    tile (block_rows, D) in SMEM; landed: a barrier the copy into the tile signals.

    Loads from GMEM keep the warpgroup's lanes busy fetching; the TMA engine (the
    Tensor Memory Accelerator) copies a whole tile on its own while the lanes do
    something else. The price is synchronisation, in both directions:

        x_ref rows ─ TMA ─▶ tile ─ (+ 1 by the lanes) ─▶ tile ─ TMA ─▶ o_ref rows
                   in: a copy returns at once;      out: the TMA engine does not see
                   the tile holds the rows only     the lanes' stores until they are
                   once its barrier says so         committed, and the kernel must not
                                                    end while a copy out still runs

    New here (all plgpu.*): copy_gmem_to_smem(src, dst, barrier) (starts the copy;
    the barrier completes when it has landed), barrier_wait(barrier),
    commit_smem() (makes the stores so far visible to the TMA engine),
    copy_smem_to_gmem(src, dst), wait_smem_to_gmem(n) (returns once at most n copies
    out are in flight). A GMEM ref is only named here, x_ref.at[rows] (a view of
    the rows, for a copy), never loaded with [...].

    Leave out the wait and interpret mode reports the race between the copy and
    your read; leave out commit_smem and the copy out may read the tile from before
    your store. The kit names either with your lines.
    """
    raise NotImplementedError


def add_one_tma(x, *, block_rows=64):
    """x + 1 for x [M, D] as in add_one, with add_one_tma_kernel moving the data.

    The call of puzzle 1 with one more scratch: plgpu.Barrier() (one barrier that
    one arrival completes; a TMA copy arrives when its bytes have landed). block_rows
    must divide M (ValueError naming it otherwise).
    """
    raise NotImplementedError


# 3. hopper.pipeline — plgpu.emit_pipeline: several copies in flight ------------

def sum_stack_kernel(x_ref, o_ref, *, block_rows, max_concurrent_steps):
    """Block b sums its rows over the L slabs: o[rows] = x[0, rows] + ... + x[L-1, rows].

    x_ref [L, M, D] in GMEM (say, L micro-batches' gradients); o_ref [M, D].

    One copy at a time leaves the SM idle while each slab travels. A pipeline keeps
    several copies in flight: while slab l is added, slabs l + 1 ... arrive in other
    SMEM slots.

        step:        0        1        2        3
        TMA:     [copy 0][copy 1][copy 2][copy 3]         max_concurrent_steps = 2:
                         [copy 1 ...     ]                two slots, two copies
        body:            [add 0  ][add 1  ][add 2  ][add 3]  in flight

    New here:

        plgpu.emit_pipeline(
            body,                      # body(indices, *smem_tiles, carry) -> carry
            grid=(steps,),             # runs in order, step after step
            in_specs=[plgpu.BlockSpec(block_shape, index_map)],   # as in pallas_call;
                                       # None in block_shape drops a dim of size 1
            max_concurrent_steps=n,    # n slots per BlockSpec: n copies in flight
            init_carry=value,          # the first carry; the last one is returned
        )(gmem_ref)                    # the GMEM ref the BlockSpec tiles

    The body gets each step's tile in SMEM, already waited for. One duty is yours:
    the pipeline refills the slot your body read with the next copy, so end the body
    with plgpu.commit_smem() once it is done reading. Carry the total in float32.
    """
    raise NotImplementedError


def sum_stack(x, *, block_rows=64, max_concurrent_steps=2):
    """x.sum(axis=0) for x [L, M, D], float32 accumulation, x.dtype out: [M, D].

    One block per block_rows rows (block_rows must divide M, ValueError naming it
    otherwise), each running a pipeline over the L slabs with max_concurrent_steps
    copies in flight (ValueError for fewer than 1; emit_pipeline keeps no more in
    flight than it has steps).
    """
    raise NotImplementedError


# 4. hopper.wgmma — one tile on the tensor core -----------------------------------

def wgmma_transforms(cols, dtype):
    """The SMEM layout the tensor core reads for tiles with rows of `cols` elements.

    The tensor core does not read a row-major tile: it reads tiles of 8 rows by one
    swizzle width, whose bytes are permuted ("swizzled") so that the 128 lanes hit
    different SMEM banks:

        (M, K) tile, f16, 128-byte swizzle (64 elements):
        ┌────────┬────────┐
        │ 8 × 64 │ 8 × 64 │   each 8 × 64 piece contiguous and swizzled:
        ├────────┼────────┤   plgpu.TilingTransform((8, 64)),
        │ 8 × 64 │ 8 × 64 │   plgpu.SwizzleTransform(128)
        └ ...    ┴ ...    ┘

    Return (plgpu.TilingTransform((8, swizzle // itemsize)),
    plgpu.SwizzleTransform(swizzle)) with the largest swizzle of 128, 64 or 32 bytes
    that divides a row of `cols` elements of `dtype` in bytes (jnp.dtype(dtype).itemsize
    bytes each; ValueError if none does). An SMEM buffer gets them with
    plgpu.SMEM(shape, dtype, transforms=...), a pipeline's slots with
    plgpu.BlockSpec(..., transforms=...); TMA copies lay the data out on the way in
    and loads undo it, so your code never sees the permutation.
    """
    raise NotImplementedError


def matmul_tile_kernel(a_ref, b_ref, o_ref, a_tile, b_tile, o_tile, landed):
    """o = a @ b for one tile: a [M, K] and b [K, N] in GMEM, on the tensor core.

    a_tile (M, K), b_tile (K, N): SMEM with the tensor core's layout; o_tile (M, N):
    SMEM for the result; landed: two barriers, one per copy in.

    New here:

        plgpu.wgmma(acc, a_tile, b_tile)   # acc += a_tile @ b_tile, issued to the
                                           # tensor core; a_tile and b_tile in SMEM
        pl.run_scoped(f, plgpu.ACC((M, N), jnp.float32))
            # calls f(acc) with a zeroed float32 accumulator (in registers) and
            # returns what f returns; acc[...] reads it, waiting for the wgmmas
        landed.at[0]   # one barrier of an array of them (plgpu.Barrier(num_barriers=2))

    M is 64 or 128 here (a wgmma's M is a multiple of 64), N at most 256. Copy a and
    b in, wait for both, multiply, then the epilogue of puzzle 2: cast the result to
    o_tile's dtype, store it, commit, copy it to o_ref, wait.
    """
    raise NotImplementedError


def matmul_tile(a, b):
    """a @ b for one tile: a [M, K], b [K, N] float16 or bfloat16, f32 accumulation.

    One block, no grid. Scratch: a_tile and b_tile with transforms=wgmma_transforms(K,
    a.dtype) (the same layout for both, taken from K as JAX's Hopper matmul does),
    o_tile (M, N) in a's dtype, plgpu.Barrier(num_barriers=2). Another dtype than
    float16 or bfloat16 raises ValueError (_check_16_bit).
    """
    raise NotImplementedError


# 5. hopper.matmul — a pipelined matmul over M, N and K tiles ---------------------

def matmul_kernel(a_ref, b_ref, o_ref, o_tile, *, tile_m, tile_n, tile_k,
                  max_concurrent_steps):
    """Block (m, n) computes the (tile_m, tile_n) tile of a @ b at rows m * tile_m and
    columns n * tile_n, streaming K in tiles of tile_k.

                         b [K, N]
                       ┌────┬────┐
                       │ k0 │    │   b's (tile_k, tile_n) tiles at (k, n)
                       │ k1 │    │
        a [M, K]       └────┴────┘
        ┌────┬────┐    ┌────┬────┐
        │ k0 │ k1 │ ──▶│acc │    │   acc += a[m, k] @ b[k, n], k = 0, 1, ...
        ├────┼────┤    ├────┼────┤
        └────┴────┘    └────┴────┘

    Puzzles 3 and 4 together: a float32 accumulator (pl.run_scoped, plgpu.ACC)
    around a plgpu.emit_pipeline over K // tile_k steps whose two BlockSpecs carry
    wgmma_transforms(tile_k, dtype) (index maps may use m and n from
    lax.axis_index); the body issues the wgmma. New here: a wgmma runs on after
    plgpu.wgmma returns, still reading a_tile and b_tile; plgpu.wgmma_wait(0) waits
    until none is running, and the body must call it before it returns, because the
    pipeline then refills those slots. (Interpret mode finishes every wgmma at once
    and cannot see this; the test reads your program.) Then puzzle 4's epilogue into
    the block's window of o_ref.
    """
    raise NotImplementedError


def matmul(a, b, *, tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2):
    """a @ b for a [M, K], b [K, N] float16 or bfloat16: [M, N] in a's dtype, float32
    accumulation, as JAX's hopper_matmul_mgpu.

    A grid of (M // tile_m, N // tile_n) blocks named ("m", "n"); one SMEM scratch
    (tile_m, tile_n) for the epilogue. tile_m, tile_n and tile_k must divide M, N and
    K (ValueError naming the argument otherwise; a and b must agree in K and dtype);
    tile_m is 64 or a multiple of it (a wgmma's M); max_concurrent_steps >= 1
    (ValueError otherwise; emit_pipeline keeps no more than K // tile_k in flight).
    """
    raise NotImplementedError


# 6. hopper.warpgroups — a producer warpgroup and a consumer warpgroup -------------

def add_one_specialized_kernel(x_ref, o_ref, tiles, loaded, consumed, *, block_rows):
    """x + 1 over x [S, D], streamed in tiles of block_rows rows by two warpgroups.

    tiles (2, block_rows, D): two SMEM slots; loaded, consumed: two barriers each.

    Warp specialisation, the shape of FlashAttention 3 and of CUTLASS's Hopper
    matmuls: one warpgroup only issues copies (the producer), another only computes
    (the consumer), and they hand tiles over through SMEM slots, so the consumer
    never waits for a copy it could have started earlier.

        producer (wg 1)                         consumer (wg 0)
        tile i ─ TMA ─▶ slot i % 2 ── loaded[slot] ──▶ reads the slot, stores + 1
        refills a slot only after  ◀── consumed[slot] ── it is done with the slot

    loaded[slot] says "tile i is in the slot" (the TMA copy completes it);
    consumed[slot] says "the consumer is done with it, refill it" (the consumer
    arrives on it). Without the first the consumer reads a slot still filling;
    without the second the producer overwrites a slot still being read: interpret
    mode reports either race with both lines. "Done with it" means the reads are
    over and committed (plgpu.commit_smem() orders them before the refill), so the
    arrival comes after the last read. The first two tiles go into empty slots.

    New here: lax.axis_index("wg") (the Pallas thread, 0 or 1: put each role under
    pl.when), plgpu.barrier_arrive(barrier), and @pl.loop(0, steps) for a loop whose
    body gets i. Each plgpu.barrier_wait takes one completion of its barrier, and a
    barrier must not end the kernel with a completion nobody waited for: the consumer
    releases a slot only if a later tile will reuse it. (The kit counts both, and
    names a wait that would never return.)
    """
    raise NotImplementedError


def add_one_specialized(x, *, block_rows=64):
    """x + 1 for x [S, D]: one block, two Pallas threads (num_threads=2,
    thread_name="wg"), a ring of two SMEM slots. block_rows must divide S (ValueError
    naming it otherwise).

    Scratch: plgpu.SMEM((2, block_rows, D), x.dtype) and two arrays of two barriers,
    plgpu.Barrier(num_barriers=2), for loaded and consumed. Both warpgroups see the
    same scratch.
    """
    raise NotImplementedError


# 7. hopper.attention — flash attention forward with wgmma for both products -------

def attention_kernel(q_ref, k_ref, v_ref, o_ref, q_tile, p_tile, o_tile, landed, *,
                     causal, block_q, block_kv, sm_scale):
    """softmax(q k^T * sm_scale) v for block (b, n, qi): block_q queries of head n.

    q_ref [B, N, T, H], k_ref and v_ref [B, K, S, H], o_ref [B, N, T, H] in GMEM.
    q_tile (block_q, H) and p_tile (block_q, block_kv): SMEM in the tensor core's
    layout; o_tile (block_q, H): SMEM for the result; landed: q's barrier.

    flash.flash_forward's online softmax, on a Hopper: the q tile stays in SMEM,
    plgpu.emit_pipeline streams k and v tiles of head n // (N // K) with
    max_concurrent_steps=2 and carries (acc, m, l) in float32, and both products run
    on the tensor core: the scores q_tile @ k_tile.T (k_tile.T reads the tile
    transposed), and p @ v, which needs p in SMEM first: store it into p_tile in
    16 bits and commit, because the tensor core reads it next. Each product gets its
    own float32 accumulator (pl.run_scoped), and reading it waits for the wgmma, so
    the pipeline may refill k's and v's slots once the step returns.

    Reductions along a row: s.max(axis=1), p.sum(axis=1); back to the tile's shape with
    lax.broadcast_in_dim(row_values, shape, [0]). The carry's registers need a layout
    a Hopper can loop over: plgpu.layout_cast(value, plgpu.Layout.WGMMA) for acc and
    plgpu.Layout.WGMMA.reduce(1) (one value per row) for m and l, as JAX's
    attention_mgpu does. With causal, query t sees keys 0..t: mask s to -inf elsewhere
    (positions from plgpu.broadcasted_iota(jnp.int32, shape, dim,
    layout=plgpu.Layout.WGMMA)), and visit only the KV blocks holding a key at or
    before the block's last query: emit_pipeline's grid may be a traced number of
    steps. Last, acc / l through o_tile and a TMA copy to o_ref.
    """
    raise NotImplementedError


def attention(q, k, v, *, causal=False, block_q=64, block_kv=64):
    """Attention forward on a Hopper: q [B, N, T, H]; k, v [B, K, S, H] with K dividing
    N (query head n reads K/V head n // (N // K)); float16 or bfloat16; returns
    [B, N, T, H] in q's dtype, sm_scale = 1 / sqrt(H); causal: query t sees keys 0..t.

    A grid of (B, N, T // block_q) blocks named ("b", "n", "q"). block_q and block_kv
    are multiples of 64 and divide T and S (ValueError naming the argument
    otherwise). Scratch: q_tile (block_q, H) with wgmma_transforms(H, dtype), p_tile
    (block_q, block_kv) with wgmma_transforms(block_kv, dtype), o_tile (block_q, H),
    plgpu.Barrier().
    """
    raise NotImplementedError
