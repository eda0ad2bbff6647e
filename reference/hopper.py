"""Hopper: Pallas on NVIDIA GPUs with Mosaic GPU — reference solutions.

Same functions and signatures as exercises/hopper.py. Learners see these
through `pytest --hint=3`, so they are written as code worth copying.
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
    rows = pl.ds(lax.axis_index("blocks") * block_rows, block_rows)   # this block's rows
    tile[...] = x_ref[rows] + 1    # GMEM -> registers (+ 1) -> SMEM
    o_ref[rows] = tile[...]        # SMEM -> registers -> GMEM


def add_one(x, *, block_rows=64):
    M, D = x.shape
    _check_divides("add_one", "block_rows", block_rows, M, "M")
    return plgpu.kernel(
        functools.partial(add_one_kernel, block_rows=block_rows),
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(M // block_rows,),
        grid_names=("blocks",),
        scratch_types=[plgpu.SMEM((block_rows, D), x.dtype)],
    )(x)


# 2. hopper.tma — asynchronous copies: GMEM -> SMEM -> GMEM by the TMA engine ---

def add_one_tma_kernel(x_ref, o_ref, tile, landed, *, block_rows):
    rows = pl.ds(lax.axis_index("blocks") * block_rows, block_rows)
    plgpu.copy_gmem_to_smem(x_ref.at[rows], tile, landed)   # starts the copy, returns
    plgpu.barrier_wait(landed)                              # the tile is in SMEM now
    tile[...] = tile[...] + 1
    plgpu.commit_smem()                                     # the TMA engine sees the store
    plgpu.copy_smem_to_gmem(tile, o_ref.at[rows])
    plgpu.wait_smem_to_gmem(0)                              # no copy left in flight


def add_one_tma(x, *, block_rows=64):
    M, D = x.shape
    _check_divides("add_one_tma", "block_rows", block_rows, M, "M")
    return plgpu.kernel(
        functools.partial(add_one_tma_kernel, block_rows=block_rows),
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(M // block_rows,),
        grid_names=("blocks",),
        scratch_types=[plgpu.SMEM((block_rows, D), x.dtype), plgpu.Barrier()],
    )(x)


# 3. hopper.pipeline — plgpu.emit_pipeline: several copies in flight ------------

def sum_stack_kernel(x_ref, o_ref, *, block_rows, max_concurrent_steps):
    L, _, D = x_ref.shape
    rows = pl.ds(lax.axis_index("blocks") * block_rows, block_rows)

    def add_tile(indices, tile, total):
        total = total + tile[...].astype(jnp.float32)
        plgpu.commit_smem()   # done reading this slot: the pipeline may refill it
        return total

    total = plgpu.emit_pipeline(
        add_tile,
        grid=(L,),
        in_specs=[plgpu.BlockSpec((None, block_rows, D), lambda l: (l, 0, 0))],
        max_concurrent_steps=max_concurrent_steps,
        init_carry=jnp.zeros((block_rows, D), jnp.float32),
    )(x_ref.at[:, rows])
    o_ref[rows] = total.astype(o_ref.dtype)


def sum_stack(x, *, block_rows=64, max_concurrent_steps=2):
    L, M, D = x.shape
    _check_divides("sum_stack", "block_rows", block_rows, M, "M")
    if max_concurrent_steps < 1:
        raise ValueError(f"sum_stack: max_concurrent_steps={max_concurrent_steps} must be "
                         ">= 1")
    return plgpu.kernel(
        functools.partial(sum_stack_kernel, block_rows=block_rows,
                          max_concurrent_steps=min(max_concurrent_steps, L)),
        out_type=jax.ShapeDtypeStruct((M, D), x.dtype),
        grid=(M // block_rows,),
        grid_names=("blocks",),
    )(x)


# 4. hopper.wgmma — one tile on the tensor core -----------------------------------

def wgmma_transforms(cols, dtype):
    row_bytes = cols * jnp.dtype(dtype).itemsize
    swizzle = next((s for s in (128, 64, 32) if row_bytes % s == 0), None)
    if swizzle is None:
        raise ValueError(f"wgmma_transforms: rows of {cols} {jnp.dtype(dtype).name} "
                         f"({row_bytes} bytes) fit no swizzle of 128, 64 or 32 bytes")
    return (plgpu.TilingTransform((8, swizzle // jnp.dtype(dtype).itemsize)),
            plgpu.SwizzleTransform(swizzle))


def matmul_tile_kernel(a_ref, b_ref, o_ref, a_tile, b_tile, o_tile, landed):
    plgpu.copy_gmem_to_smem(a_ref, a_tile, landed.at[0])
    plgpu.copy_gmem_to_smem(b_ref, b_tile, landed.at[1])
    plgpu.barrier_wait(landed.at[0])
    plgpu.barrier_wait(landed.at[1])

    def product(acc):
        plgpu.wgmma(acc, a_tile, b_tile)   # acc += a_tile @ b_tile on the tensor core
        return acc[...]                    # reading it waits for the wgmma

    result = pl.run_scoped(product, plgpu.ACC(o_tile.shape, jnp.float32))
    o_tile[...] = result.astype(o_tile.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_tile, o_ref)
    plgpu.wait_smem_to_gmem(0)


def matmul_tile(a, b):
    M, K = a.shape
    _, N = b.shape
    _check_16_bit("matmul_tile", a, b)
    transforms = wgmma_transforms(K, a.dtype)
    return plgpu.kernel(
        matmul_tile_kernel,
        out_type=jax.ShapeDtypeStruct((M, N), a.dtype),
        scratch_types=[
            plgpu.SMEM((M, K), a.dtype, transforms=transforms),
            plgpu.SMEM((K, N), b.dtype, transforms=transforms),
            plgpu.SMEM((M, N), a.dtype),
            plgpu.Barrier(num_barriers=2),
        ],
    )(a, b)


# 5. hopper.matmul — a pipelined matmul over M, N and K tiles ---------------------

def matmul_kernel(a_ref, b_ref, o_ref, o_tile, *, tile_m, tile_n, tile_k,
                  max_concurrent_steps):
    K = a_ref.shape[1]
    m, n = lax.axis_index("m"), lax.axis_index("n")
    transforms = wgmma_transforms(tile_k, a_ref.dtype)

    def product(acc):
        def step(indices, a_tile, b_tile):
            plgpu.wgmma(acc, a_tile, b_tile)
            plgpu.wgmma_wait(0)   # done reading the slots before the pipeline refills them

        plgpu.emit_pipeline(
            step,
            grid=(K // tile_k,),
            in_specs=[
                plgpu.BlockSpec((tile_m, tile_k), lambda k: (m, k), transforms=transforms),
                plgpu.BlockSpec((tile_k, tile_n), lambda k: (k, n), transforms=transforms),
            ],
            max_concurrent_steps=max_concurrent_steps,
        )(a_ref, b_ref)
        return acc[...]

    result = pl.run_scoped(product, plgpu.ACC((tile_m, tile_n), jnp.float32))
    o_tile[...] = result.astype(o_tile.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_tile, o_ref.at[pl.ds(m * tile_m, tile_m),
                                             pl.ds(n * tile_n, tile_n)])
    plgpu.wait_smem_to_gmem(0)


def matmul(a, b, *, tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2):
    M, K = a.shape
    K2, N = b.shape
    if K2 != K:
        raise ValueError(f"matmul: a is [M, K] = {a.shape} and b [K, N] = {b.shape}: "
                         "their K differ")
    if a.dtype != b.dtype:
        raise ValueError(f"matmul: a is {a.dtype} and b {b.dtype}: give both one dtype")
    _check_16_bit("matmul", a, b)
    _check_divides("matmul", "tile_m", tile_m, M, "M")
    _check_divides("matmul", "tile_n", tile_n, N, "N")
    _check_divides("matmul", "tile_k", tile_k, K, "K")
    if max_concurrent_steps < 1:
        raise ValueError(f"matmul: max_concurrent_steps={max_concurrent_steps} must be >= 1")
    kernel = functools.partial(
        matmul_kernel, tile_m=tile_m, tile_n=tile_n, tile_k=tile_k,
        max_concurrent_steps=min(max_concurrent_steps, K // tile_k))
    return plgpu.kernel(
        kernel,
        out_type=jax.ShapeDtypeStruct((M, N), a.dtype),
        grid=(M // tile_m, N // tile_n),
        grid_names=("m", "n"),
        scratch_types=[plgpu.SMEM((tile_m, tile_n), a.dtype)],
    )(a, b)


# 6. hopper.warpgroups — a producer warpgroup and a consumer warpgroup -------------

def add_one_specialized_kernel(x_ref, o_ref, tiles, loaded, consumed, *, block_rows):
    steps = x_ref.shape[0] // block_rows
    slots = tiles.shape[0]

    @pl.when(lax.axis_index("wg") == 1)
    def producer():
        @pl.loop(0, steps)
        def fetch(i):
            slot = lax.rem(i, slots)

            @pl.when(i >= slots)
            def wait_until_released():
                plgpu.barrier_wait(consumed.at[slot])

            plgpu.copy_gmem_to_smem(x_ref.at[pl.ds(i * block_rows, block_rows)],
                                    tiles.at[slot], loaded.at[slot])

    @pl.when(lax.axis_index("wg") == 0)
    def consumer():
        @pl.loop(0, steps)
        def compute(i):
            slot = lax.rem(i, slots)
            plgpu.barrier_wait(loaded.at[slot])
            o_ref[pl.ds(i * block_rows, block_rows)] = tiles[slot] + 1
            plgpu.commit_smem()   # the reads are done before the slot is refilled

            @pl.when(i + slots < steps)   # only a slot that will be refilled is released
            def release():
                plgpu.barrier_arrive(consumed.at[slot])


def add_one_specialized(x, *, block_rows=64):
    S, D = x.shape
    _check_divides("add_one_specialized", "block_rows", block_rows, S, "S")
    slots = 2
    return plgpu.kernel(
        functools.partial(add_one_specialized_kernel, block_rows=block_rows),
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        num_threads=2,
        thread_name="wg",
        scratch_types=[
            plgpu.SMEM((slots, block_rows, D), x.dtype),
            plgpu.Barrier(num_barriers=slots),   # loaded: the producer's copy landed
            plgpu.Barrier(num_barriers=slots),   # consumed: the consumer is done with it
        ],
    )(x)


# 7. hopper.attention — flash attention forward with wgmma for both products -------

def attention_kernel(q_ref, k_ref, v_ref, o_ref, q_tile, p_tile, o_tile, landed, *,
                     causal, block_q, block_kv, sm_scale):
    N, K = q_ref.shape[1], k_ref.shape[1]
    S, H = k_ref.shape[2], k_ref.shape[3]
    b, n, qi = lax.axis_index("b"), lax.axis_index("n"), lax.axis_index("q")
    rows = pl.ds(qi * block_q, block_q)
    kv_head = n // (N // K)
    transforms = wgmma_transforms(H, q_ref.dtype)

    plgpu.copy_gmem_to_smem(q_ref.at[b, n, rows], q_tile, landed)
    plgpu.barrier_wait(landed)

    def kv_step(indices, k_tile, v_tile, carry):
        acc, m, l = carry
        (j,) = indices

        def scores(s_acc):
            plgpu.wgmma(s_acc, q_tile, k_tile.T)   # q @ k.T, k's tile read transposed
            return s_acc[...]

        s = pl.run_scoped(scores, plgpu.ACC((block_q, block_kv), jnp.float32)) * sm_scale
        if causal:
            q_pos = qi * block_q + plgpu.broadcasted_iota(
                jnp.int32, s.shape, 0, layout=plgpu.Layout.WGMMA)
            k_pos = j * block_kv + plgpu.broadcasted_iota(
                jnp.int32, s.shape, 1, layout=plgpu.Layout.WGMMA)
            s = jnp.where(k_pos <= q_pos, s, -jnp.inf)
        m_new = jnp.maximum(m, s.max(axis=1))
        alpha = jnp.exp(m - m_new)
        p = jnp.exp(s - lax.broadcast_in_dim(m_new, s.shape, [0]))
        l = l * alpha + p.sum(axis=1)
        p_tile[...] = p.astype(p_tile.dtype)
        plgpu.commit_smem()                        # the tensor core reads p_tile next

        def values(pv_acc):
            plgpu.wgmma(pv_acc, p_tile, v_tile)
            return pv_acc[...]

        pv = pl.run_scoped(values, plgpu.ACC((block_q, H), jnp.float32))
        return acc * lax.broadcast_in_dim(alpha, acc.shape, [0]) + pv, m_new, l

    if causal:   # the kv blocks with a key at or before the block's last query
        steps = jnp.minimum(S // block_kv, pl.cdiv((qi + 1) * block_q, block_kv))
    else:
        steps = S // block_kv
    rows_layout = plgpu.Layout.WGMMA.reduce(1)   # one value per row of a wgmma result
    init = (plgpu.layout_cast(jnp.zeros((block_q, H), jnp.float32), plgpu.Layout.WGMMA),
            plgpu.layout_cast(jnp.full((block_q,), -jnp.inf, jnp.float32), rows_layout),
            plgpu.layout_cast(jnp.zeros((block_q,), jnp.float32), rows_layout))
    acc, m, l = plgpu.emit_pipeline(
        kv_step,
        grid=(steps,),
        in_specs=[plgpu.BlockSpec((block_kv, H), lambda j: (j, 0), transforms=transforms),
                  plgpu.BlockSpec((block_kv, H), lambda j: (j, 0), transforms=transforms)],
        max_concurrent_steps=2,
        init_carry=init,
    )(k_ref.at[b, kv_head], v_ref.at[b, kv_head])
    o_tile[...] = (acc / lax.broadcast_in_dim(l, acc.shape, [0])).astype(o_tile.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_tile, o_ref.at[b, n, rows])
    plgpu.wait_smem_to_gmem(0)


def attention(q, k, v, *, causal=False, block_q=64, block_kv=64):
    B, N, T, H = q.shape
    Bk, K, S, Hk = k.shape
    if (Bk, Hk) != (B, H) or v.shape != k.shape or N % K:
        raise ValueError(f"attention: q [B, N, T, H] = {q.shape} and k, v [B, K, S, H] = "
                         f"{k.shape}, {v.shape}: B and H must agree and K divide N")
    _check_16_bit("attention", q, k, v)
    if block_q % 64:
        raise ValueError(f"attention: block_q={block_q} must be a multiple of 64 (a "
                         "wgmma's M)")
    if block_kv % 64:
        raise ValueError(f"attention: block_kv={block_kv} must be a multiple of 64")
    _check_divides("attention", "block_q", block_q, T, "T")
    _check_divides("attention", "block_kv", block_kv, S, "S")
    transforms = wgmma_transforms(H, q.dtype)
    kernel = functools.partial(attention_kernel, causal=causal, block_q=block_q,
                               block_kv=block_kv, sm_scale=1 / math.sqrt(H))
    return plgpu.kernel(
        kernel,
        out_type=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(B, N, T // block_q),
        grid_names=("b", "n", "q"),
        scratch_types=[
            plgpu.SMEM((block_q, H), q.dtype, transforms=transforms),
            plgpu.SMEM((block_q, block_kv), q.dtype,
                       transforms=wgmma_transforms(block_kv, q.dtype)),
            plgpu.SMEM((block_q, H), q.dtype),
            plgpu.Barrier(),
        ],
    )(q, k, v)
