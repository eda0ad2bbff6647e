"""matmul's lesson machinery: what the tests know of a tiled matmul besides its right
answer.

* models of the known wrong accumulations (a running sum stored in bf16 at every k
  step, bf16 partial products: ``summed_in``, ``summed_in_bf16_partials``);
* the budgets of an (i, j, k) grid of (bm, bk) x (bk, bn) blocks: the bytes its blocks
  imply (``implied_bytes``: a block fetched again only when its index changes) and the
  flops of its dots (``tile_flops``);
* choose_blocks' rules: legal TPU blocks, the VMEM they take, the fewest bytes a legal
  choice that fits moves, and the check that words which rule a choice broke
  (``judge_blocks``).
"""
import itertools

from ..checking import fail
from ..frozen import np
from ..traffic import mib
from .common import cdiv


def k_blocks(a, b, bk):
    """The f32 products of each K block, a[:, k] @ b[k, :], in the order a kernel adds them."""
    return [a[:, k:k + bk].astype(np.float32) @ b[k:k + bk].astype(np.float32)
            for k in range(0, a.shape[1], bk)]


def k_dropped(a, b, bk, dtype):
    """{"first_k_dropped": ...}: the sum of every K block but the first (a scratch
    zeroed after step 0's product was added), where there is more than one K block."""
    if a.shape[1] <= bk:
        return {}
    return {"first_k_dropped": lambda: sum(k_blocks(a, b, bk)[1:]).astype(dtype)}


def summed_in(dtype, a, b, bk):
    """What a kernel returns whose running sum is stored in `dtype` after every k step."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for product in k_blocks(a, b, bk):
        acc = (acc + product).astype(dtype).astype(np.float32)
    return acc.astype(dtype)


def summed_in_bf16_partials(a, b, bk):
    """An f32 running sum of products rounded to bf16: jnp.dot without preferred_element_type."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for product in k_blocks(a, b, bk):
        acc += product.astype(a.dtype).astype(np.float32)
    return acc.astype(a.dtype)


def implied_bytes(M, K, N, bm, bk, bn, itemsize):
    """Bytes between HBM and VMEM for an (i, j, k) matmul grid, by moved_bytes' rule: a
    block is fetched again only when its index changes from one step to the next."""
    a_reads = 1 if bk == K else cdiv(N, bn)                  # a's (i, 0) stays put across j
    b_reads = 1 if bk == K and bn >= N else cdiv(M, bm)      # b's block stays only if unique
    return itemsize * (M * K * a_reads + K * N * b_reads + M * N)


def epilogue_bytes(M, K, N, bm, bk, bn, itemsize):
    """Bytes of matmul_bias_gelu's grid: matmul_tiled's (implied_bytes) and the bias's
    (0, j) blocks, fetched again whenever j changes."""
    bias_reads = 1 if bn >= N else cdiv(M, bm)   # (0, j) changes with j, again for each i
    return implied_bytes(M, K, N, bm, bk, bn, itemsize) + N * itemsize * bias_reads


def check_blocks_given(ran, implied, *, bm, bk, bn):
    """Fails when the kernel moved fewer bytes than the blocks it was given imply
    (``implied``): it tiles with blocks of its own."""
    if ran.traffic.total < implied:
        fail("traffic_low", "your kernel moves fewer bytes than its blocks imply: "
                            "does matmul_tiled use the bm, bk and bn it is given?", [
                                ("bytes", f"moved: yours {ran.traffic.total} B · bm={bm} "
                                          f"bk={bk} bn={bn} imply {implied} B")])


def check_bytes_modelled(ran, model, *, bm, bk, bn):
    """Fails when matmul_tiled, run with choose_blocks' blocks, does not move the bytes
    the traffic model that judged them says (``model``)."""
    yours = ran.traffic
    if yours.total != model:
        moved = " · ".join(f"{op.name} {op.direction} {op.bytes} B" for op in yours.operands)
        fail("model_mismatch", "matmul_tiled does not move what these blocks imply: "
                               "does it use the bm, bk and bn it is given, with K last in its "
                               "grid?", [
                                   ("blocks", f"(bm, bk, bn) = ({bm}, {bk}, {bn})"),
                                   ("bytes", f"moved: matmul_tiled {yours.total} B · model "
                                             f"{model} B"),
                                   ("moved", moved)])


def tile_flops(M, K, N, bm, bn, batch=1):
    """Flops of the dots over every (bm, bn) output tile: a partial tile at the end
    is computed whole (its extra rows and columns are dropped when stored)."""
    return 2 * batch * cdiv(M, bm) * bm * cdiv(N, bn) * bn * K


def sublanes(itemsize):
    return max(8, 32 // itemsize)


def vmem_used(bm, bk, bn, itemsize):
    """a, b and o blocks double-buffered, plus the f32 accumulator."""
    return 2 * itemsize * (bm * bk + bk * bn + bm * bn) + 4 * bm * bn


def legal(dim, block, align):
    return dim % block == 0 and (block % align == 0 or block == dim)


def best_bytes(M, K, N, itemsize, vmem_bytes):
    blocks = itertools.product(
        *[[b for b in range(1, dim + 1) if legal(dim, b, align)]
          for dim, align in ((M, sublanes(itemsize)), (K, 128), (N, 128))])
    return min(implied_bytes(M, K, N, *bl, itemsize) for bl in blocks
               if vmem_used(*bl, itemsize) <= vmem_bytes)


def judge_blocks(blocks, M, K, N, itemsize, vmem_bytes):
    """Raises Wrong naming the first broken rule: legal blocks, the budget, the bytes."""
    if not (isinstance(blocks, (tuple, list)) and len(blocks) == 3
            and all(isinstance(x, (int, np.integer)) and x > 0 for x in blocks)):
        fail("returned", "choose_blocks must return a tuple of three positive ints, "
                    "(bm, bk, bn).", [("returned", repr(blocks))])
    bm, bk, bn = (int(x) for x in blocks)
    shown = ("blocks", f"yours (bm, bk, bn) = ({bm}, {bk}, {bn}) for M={M} K={K} N={N}, "
                       f"itemsize {itemsize}")
    rows = sublanes(itemsize)
    for name, block, dim, dim_name, align, why in (
            ("bm", bm, M, "M", rows, f"{rows} rows fill a vreg at itemsize {itemsize}"),
            ("bk", bk, K, "K", 128, "bk is a's last dim: 128 lanes"),
            ("bn", bn, N, "N", 128, "128 lanes")):
        if not legal(dim, block, align):
            rule = (f"{name} must divide {dim_name}={dim} and be a multiple of {align} "
                    f"({why}), or equal {dim_name}")
            fail("block_rule", f"{name}={block} is not a legal block for "
                                      f"{dim_name}={dim}.", [shown, ("rule", rule)])
    used = vmem_used(bm, bk, bn, itemsize)
    if used > vmem_bytes:
        fail("vmem_budget", "your blocks do not fit in the VMEM budget.", [
            shown, ("vmem", f"2 × {itemsize} B × (bm·bk + bk·bn + bm·bn) + 4 B × bm·bn = "
                            f"{used} B = {mib(used)} > budget {mib(vmem_bytes)}")])
    yours, best = implied_bytes(M, K, N, bm, bk, bn, itemsize), best_bytes(M, K, N, itemsize,
                                                                      vmem_bytes)
    if yours > best:
        minimum = itemsize * (M * K + K * N + M * N)
        a_reads = 1 if bk == K else N // bn
        b_reads = 1 if bk == K and bn == N else M // bm
        shown_bytes = mib(yours, best, minimum)
        fail("traffic", "legal blocks that fit, but other blocks move fewer bytes.", [
            shown, ("bytes", f"moved: yours {shown_bytes[0]} · best legal choice "
                             f"{shown_bytes[1]} · every byte once {shown_bytes[2]}"),
            ("reads", f"a read {a_reads} × its size, b read {b_reads} × its size, "
                      f"o written once")])


def legal_blocks(M, K, N, itemsize):
    return list(itertools.product(
        *[[b for b in range(1, dim + 1) if legal(dim, b, align)]
          for dim, align in ((M, sublanes(itemsize)), (K, 128), (N, 128))]))


def check_bf16_on_the_mxu(ran, a) -> None:
    """Where a is bfloat16, every dot takes bfloat16 operands: the MXU multiplies bf16 at
    full rate and accumulates in float32 when asked (``preferred_element_type``); float32
    operands (the blocks cast up, at Precision.HIGHEST) give the same sums here and take
    the MXU several passes per product. Read from the dots the kernels executed."""
    if np.dtype(a.dtype) != np.dtype("bfloat16"):
        return
    wide = {}
    for counts in ran.counts:
        for dtype, flops in counts.dot_flops.items():
            if dtype != "bfloat16":
                wide[dtype] = wide.get(dtype, 0) + flops
    if wide:
        dtype, flops = max(wide.items(), key=lambda item: item[1])
        fail("dot_dtype", (
            f"your dots multiply {dtype} operands where a and b are bfloat16: the lesson is "
            "the MXU's bf16 path, bf16 blocks in and a float32 sum out "
            "(preferred_element_type=jnp.float32). Cast up first and the products are the "
            "same, but each one takes the MXU several passes. Hand the dot the blocks as "
            "they are."),
            [("dots", f"{flops:,} dot flops with {dtype} operands, where a is bfloat16")])

