"""The hopper chapter's lesson machinery: what its tests know beyond the right answers.

* readers of the traced Mosaic GPU kernel: its SMEM allocations and whether the data
  passes through them, direct loads and stores of GMEM refs, the buffers
  plgpu.emit_pipeline allocates, the wgmma calls; and, from the walk of the kernel on
  its integers (``gpu_walk.walk``), TMA windows past their refs, the wgmmas each block
  issues (K steps, KV blocks visited) and barrier completions nobody waited for;
* checks that word the chapter's findings from them (``fail``), with the learner's
  lines;
* the attention model in float64 and its known wrong variants (K/V heads picked
  modulo K, an accumulator never rescaled), and which K/V head each query head read.
"""
import ast
import math
from pathlib import Path

from .. import gpu_walk, jaxcompat
from ..checking import OUTER_SHARE, fail, line_of
from ..frozen import np
from .common import f64


# --- what your kernels allocate and touch -------------------------------------------

def kernel_of(ran):
    return ran.program.sites[0].call


def check_smem_tile(ran, shape, what):
    """The kernel allocates an SMEM buffer of ``shape`` of its own (scratch_types)."""
    found = jaxcompat.smem_allocations(kernel_of(ran).kernel)
    if not any(tuple(s)[-len(shape):] == tuple(shape) or
               int(np.prod(s)) == int(np.prod(shape)) for s in found):
        fail("no_smem", (
            f"your kernel has no SMEM tile of shape {shape} for {what}: this puzzle's data "
            "passes through shared memory. Allocate it with plgpu.SMEM(shape, dtype) in "
            "scratch_types (the kernel gets it after its outputs)."),
            [("smem", f"yours: {found or 'none'}")])


def check_by_tma_only(ran):
    """The kernel never loads from or stores to a GMEM ref itself: the data moves by TMA."""
    direct = jaxcompat.gmem_accesses(kernel_of(ran).kernel)
    if direct:
        fail("gmem_access", (
            "your kernel reads or writes a GMEM ref with [...] itself: in this puzzle the "
            "data travels by TMA only, plgpu.copy_gmem_to_smem into an SMEM tile and "
            "plgpu.copy_smem_to_gmem back. Index GMEM refs only with .at[...] to name "
            "what a copy moves."), [("at", line_of(direct[0]))])


def check_loads_by_tma(ran, what):
    """The kernel reads no GMEM ref itself: its inputs reach it by TMA copies (its own or
    a pipeline's) into SMEM. A kernel that loads x_ref[...] straight from global memory
    runs here, and on a Hopper too, but skips what the puzzle is about; where a pipeline
    is the lesson, its body would be a decoy."""
    loads = [eqn for eqn in jaxcompat.gmem_accesses(kernel_of(ran).kernel)
             if eqn.primitive.name == "get"]
    if loads:
        fail("gmem_load", (
            "your kernel loads from a GMEM ref with [...] itself, straight from global "
            f"memory: in this puzzle the inputs reach the kernel by TMA, {what}. Index a "
            "GMEM ref only with .at[...], to name what a copy moves."),
            [("load", line_of(loads[0]))])


def check_roles(ran):
    """Warp specialisation: the warpgroup that issues the copies into SMEM (the
    producer) computes nothing on arrays, and the one that computes (the consumer)
    issues no copy in. One warpgroup doing both, the other idling on a barrier, is the
    kernel of puzzle 2 with a second thread that does nothing."""
    found = gpu_walk.walk(kernel_of(ran))
    if found is None or len(found.roles) < 2:
        return
    both = [(n, role) for n, role in sorted(found.roles.items())
            if role.copies_in and role.array_ops]
    producers = [n for n, role in found.roles.items() if role.copies_in]
    consumers = [n for n, role in found.roles.items() if role.array_ops]
    if both or not producers or not consumers:
        shown = " · ".join(f"warpgroup {n}: {role.copies_in} copies in, {role.array_ops} "
                           "operations on arrays" for n, role in sorted(found.roles.items()))
        facts = [("roles", shown)]
        if both:
            facts.append(("copies", line_of(both[0][1].first_copy)))
            facts.append(("computes", line_of(both[0][1].first_op)))
        fail("roles", (
            "the warpgroups do not split the work: one warpgroup (the producer) issues the "
            "TMA copies into the ring's slots and computes nothing, the other (the consumer) "
            "waits for each slot, computes on it and releases it. Branch on "
            "lax.axis_index(thread_name) so each runs its own part."), facts)


def check_ring_overlaps(ran, tiles: int):
    """A ring of slots lets the producer fill the next slot while the consumer still works
    on the last: walked on the kernel's integers (``gpu_walk``, each warpgroup running as
    far as its waits let it), some copy into SMEM is issued while the data of an earlier
    one is still waiting to be taken. A producer that waits for the consumer to release
    a tile before it copies the next one is a handshake: one tile at a time, whatever
    the number of slots. ``tiles``: the copies a block makes (below 2 nothing can
    overlap)."""
    found = gpu_walk.walk(kernel_of(ran))
    if found is None or tiles < 2 or found.ahead >= 2:
        return
    fail("ring_serial", (
        "your producer never has a tile ahead: walked on the kernel's integers, with each "
        "warpgroup running as far as its barrier waits let it, no copy into a slot is "
        "issued while the consumer has yet to take the tile before it. The producer waits "
        "for each tile to be released before it copies the next, so copy and compute take "
        "turns, and the second slot (if used) changes nothing. In a ring, tile i goes "
        "into slot i % 2, and the producer waits only for the release of the tile that "
        "last used that slot, two tiles back (none for the first two)."),
        [("ahead", f"most copies into SMEM waiting to be taken at once: {found.ahead} "
                   "(a ring: 2)")])


def check_smem_used(ran, what):
    """The data passes through the kernel's own SMEM: a store into one of its SMEM
    buffers, and a load from it whose values move the output (run again with what the
    loads return doubled in half its elements, the output changes)."""
    stores, loads, gets = set(), set(), {}

    def walk(jaxpr, owned):
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name in ("swap", "get") and eqn.invars[0] in owned:
                (stores if name == "swap" else loads).add(owned[eqn.invars[0]])
                if name == "get":
                    gets.setdefault(owned[eqn.invars[0]], []).append(id(eqn))
            view = jaxcompat.control(eqn)
            if isinstance(view, jaxcompat.Scoped):
                inner, _ = view.body
                mine = {v: id(v) for v in inner.invars
                        if jaxcompat.memory_space(v.aval) == "smem"
                        and "barrier" not in str(v.aval.dtype)}
                walk(inner, {**{c: owned[o] for c, o in zip(inner.constvars, eqn.invars)
                                if o in owned}, **mine})
                continue
            for inner, _ in jaxcompat.parts(eqn):
                walk(inner, {})

    walk(kernel_of(ran).kernel, {})
    if not stores & loads:
        fail("smem_unused", (
            f"your kernel allocates an SMEM tile but the data never passes through it, where "
            f"this puzzle has it go {what}. Store the block's result into the tile (tile[...] = ...) and load it "
            "from there (tile[...]) for the store into o_ref."),
            [("smem", f"stored into: {'yes' if stores else 'no'} · loaded from: "
                      f"{'yes' if loads else 'no'}")])
    through = [eqn for buffer in stores & loads for eqn in gets[buffer]]
    if ran.moves_when_perturbed(through) is False:
        fail("smem_unused", (
            "what your kernel loads from its SMEM tile never reaches the output: the kit "
            "ran it again with those loads' values doubled in half their elements, and "
            "o_ref came out the same. The result goes around the tile, which is stored "
            f"and read for nothing, where this puzzle has it go {what}. Store into o_ref "
            "the value you load from the tile."),
            [("smem", "stored into: yes · loaded from: yes · the loaded values move the "
                      "output: no")])


def kernel_parameters(ran) -> list[str]:
    """The names of your kernel function's parameters, in order (its refs): of the
    innermost function around the kernel's first traced line."""
    call = kernel_of(ran)
    try:
        tree = ast.parse(Path(call.source).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, TypeError):
        return []
    around = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
              and node.lineno <= call.line <= node.end_lineno]   # its first traced line
    if not around:
        return []
    inner = min(around, key=lambda node: node.end_lineno - node.lineno)
    return [a.arg for a in inner.args.posonlyargs + inner.args.args]


def check_copies_in_bounds(ran):
    """Every TMA copy's GMEM window lies inside its ref and inside the .at[...] view it
    is cut from, in every block (found on the kernel's integers, before it ran). A
    Hopper reads zeros past the end of a ref and drops what a copy out writes there:
    in this chapter's shapes, which the blocks divide, that is always a wrong index."""
    found = gpu_walk.walk(kernel_of(ran))
    if found is None or not found.outside:
        return
    first = found.outside[0]
    block = ", ".join(f"{axis}={index}" for axis, index in first.block.items())
    names = kernel_parameters(ran)
    ref = names[first.operand] if first.operand is not None and first.operand < len(names) \
        else "the GMEM ref"
    reading = first.copy.primitive.name == "copy_gmem_to_smem"
    fail("tma_outside", (
        f"a TMA copy {'reads' if reading else 'writes'} past the end of its GMEM ref (or "
        "of the .at[...] view it is cut from): a Hopper "
        f"{'reads zeros there' if reading else 'drops what lands there'}, GPU interpret "
        "mode whatever lies beyond. Check the index map or the .at[...] offsets of the "
        "copy under 'copy': each block's window is its block index times the block size, "
        "along the axis the index is for."), [
        ("copy", line_of(first.copy)),
        ("window", f"{ref}: {first.where}" + (f" (block {block})" if block else ""))])


def check_pipeline(ran, *, slots, buffers, what):
    """plgpu.emit_pipeline allocated ``buffers`` SMEM buffers of ``slots`` slots each."""
    found = jaxcompat.pipeline_buffers(kernel_of(ran).kernel)
    if len(found) != buffers or any(shape[0] != slots for shape in found):
        fail("pipeline_slots", (
            f"your pipeline keeps {sorted({s[0] for s in found}) or 'no'} slot(s) per "
            f"operand, where the puzzle asks for {slots}: plgpu.emit_pipeline allocates "
            "max_concurrent_steps slots for each BlockSpec and keeps that many copies in "
            f"flight. Pass max_concurrent_steps through (at most the number of steps), "
            f"with one BlockSpec per operand it streams ({what})."),
            [("pipeline", f"yours {len(found)} buffer(s) of {[s[0] for s in found]} slots "
                          f"(blocks {[tuple(s[1:]) for s in found]}) · the puzzle's "
                          f"{buffers} of {slots}")])


def check_wgmmas(ran, *, at_least, why):
    found = jaxcompat.wgmma_operands(kernel_of(ran).kernel)
    if len(found) < at_least:
        fail("wgmma_count", f"your kernel makes {len(found)} plgpu.wgmma call(s): {why}",
             [("wgmma", f"yours {len(found)} · the puzzle's {at_least}")])


# --- 4. wgmma: the layout transforms ------------------------------------------------

def check_products_on_tensor_cores(ran):
    """The products are the wgmmas': multiplies that are a matmul written elementwise
    (``products``: outer products, or a vector times a matrix summed) stay under
    ``checking.OUTER_SHARE`` of the wgmmas' flops, whatever share of the result the
    wgmmas make. Walked on the kernel's integers, every block."""
    found = gpu_walk.walk(kernel_of(ran))
    if found is None or not found.outer:
        return
    flops = sum(2 * math.prod(shape[1:]) * times for (shape, _, _), times in found.dots.items())
    if 2 * found.outer <= OUTER_SHARE * flops:
        return
    fail("vpu_products", (
        f"your kernel multiplies {found.outer:,} pairs elementwise in a pattern that is a "
        "matrix product: an outer product (a[:, :, None] * b[None, :, :], or a column "
        "times a row summed in a loop) or a vector times a matrix summed with jnp.sum. "
        "That is the tensor cores' work done one multiply at a time on the CUDA cores; a "
        "wgmma mixed in beside it does not change who did the work. Let plgpu.wgmma "
        "compute every product of the tiles."),
        [("work", f"wgmma flops: {flops:,} · elementwise products shaped like a matmul: "
                  f"{2 * found.outer:,} flops")])


def check_wgmma_transforms(wgmma_transforms, cols, dtype):
    """wgmma_transforms(cols, dtype): the widest swizzle (128, 64, 32 bytes) dividing a
    row in bytes, and a tiling of 8 rows by that swizzle counted in elements."""
    itemsize = np.dtype(dtype).itemsize
    row_bytes = cols * itemsize
    widest = next(s for s in (128, 64, 32) if row_bytes % s == 0)
    transforms = wgmma_transforms(cols, dtype)
    swizzle = next((int(t.swizzle) for t in transforms if hasattr(t, "swizzle")), None)
    tiling = next((tuple(t.tiling) for t in transforms if hasattr(t, "tiling")), None)
    call = f"wgmma_transforms({cols}, {dtype})"
    if swizzle != widest:
        fail("swizzle_not_widest", (
            f"{call} picks a {swizzle}-byte swizzle where {widest} bytes divide a row of "
            f"{row_bytes} bytes: take the widest that fits (try 128, then 64, then 32). A "
            "wider swizzle spreads the 128 lanes' reads of a tile over more SMEM banks."),
            [("swizzle", f"yours {swizzle} · the widest that divides {row_bytes}: {widest}")])
    if tiling != (8, swizzle // itemsize):
        fail("tiling_in_bytes", (
            f"{call} tiles by {tiling}: the TilingTransform counts elements, not bytes. A "
            f"{swizzle}-byte swizzle of {dtype} ({itemsize} bytes each) is "
            f"{swizzle // itemsize} elements wide: TilingTransform((8, swizzle // "
            "itemsize))."),
            [("tiling", f"yours {tiling} · expected (8, {swizzle // itemsize})")])


# --- 5. matmul: one wgmma per K step ------------------------------------------------

def check_k_steps(ran, *, K, tile_k):
    """One wgmma per K step, in every block: the pipeline's grid is (K // tile_k,)."""
    found = gpu_walk.walk(kernel_of(ran))   # one wgmma per K step, in every block
    steps = sorted(set(found.wgmmas.values())) if found is not None else []
    if steps and steps != [K // tile_k]:
        fail("k_steps", (
            f"your pipeline runs {' or '.join(map(str, steps))} step(s) per block (one wgmma "
            f"each), where K // tile_k = {K} // {tile_k} = {K // tile_k}: its grid is "
            "(K // tile_k,), one step per K tile."),
            [("k steps", f"yours {' or '.join(map(str, steps))} · K // tile_k = "
                         f"{K // tile_k}")])


# --- 6. warpgroups: every barrier completion waited ---------------------------------

def check_barriers_waited(ran):
    """No barrier ends the kernel with completions nobody waited for (a Hopper must not
    free a barrier with an arrival pending; GPU interpret mode does not count them)."""
    found = gpu_walk.walk(kernel_of(ran))
    if found is not None and found.unwaited:
        extra = found.unwaited[0]
        fail("barrier_unwaited", (
            "a barrier ends the kernel with completions nobody waited for: your "
            "plgpu.barrier_arrive (under 'arrives') completes it more often than the other "
            "warpgroup waits on it. On a Hopper a barrier must not be freed with an "
            "arrival pending; GPU interpret mode does not count them. Arrive only when a "
            "wait will take it: the consumer releases a slot only if a later tile reuses "
            "it (i + 2 < steps)."),
            [("arrives", line_of(extra.arrive)),
             ("", f"barrier[{', '.join(map(str, extra.index))}] completes "
                  f"{extra.completions} times, waited {extra.waits}")])


# --- 7. attention: the model, known wrong answers, the heads and KV blocks visited ---

def attention_f64(q, k, v, causal, *, normalised=True):
    """Softmax attention in float64: q [B, N, T, H], k and v [B, K, S, H] shared by
    N // K query heads each; causal: query t sees keys 0..t. ``normalised=False``: the
    online softmax's acc never divided by l (each row's weights sum to l, not 1)."""
    q, k, v = f64(q, k, v)
    N, K = q.shape[1], k.shape[1]
    k, v = np.repeat(k, N // K, axis=1), np.repeat(v, N // K, axis=1)
    s = np.einsum("bnth,bnsh->bnts", q, k) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    if normalised:
        p = p / p.sum(-1, keepdims=True)
    return np.einsum("bnts,bnsh->bnth", p, v)


def attention_f64_heads(q, k, v, causal, kv_head):
    """attention_f64 with query head n reading K/V head kv_head(n)."""
    N = q.shape[1]
    heads = [kv_head(n) for n in range(N)]
    return attention_f64(q, k[:, heads], v[:, heads], causal)


def check_kv_heads_read(ran, q, k, v, causal):
    """Where query heads share K/V heads, which K/V head each query head read: the one
    whose attention its output equals. Fails, naming them, where a head read another
    head's K/V than n // (N // K)."""
    N, K = q.shape[1], k.shape[1]
    if K in (1, N) or q.size * k.shape[2] > 2 ** 24:   # the GPU config: values only
        return
    yours = np.asarray(ran.output, np.float64)
    if yours.shape != q.shape:
        return   # the shape check says so

    def read(n):
        for j in range(K):
            one = attention_f64(q[:, n:n + 1], k[:, j:j + 1], v[:, j:j + 1], causal)
            if np.allclose(yours[:, n:n + 1], one.astype(q.dtype), atol=2e-2, rtol=2e-2):
                return j
        return None

    heads = [read(n) for n in range(N)]
    group = N // K
    if all(j == n // group for n, j in enumerate(heads)) or \
            all(j is None for n, j in enumerate(heads) if j != n // group):
        return   # right, or wrong in a way no K/V head explains: check() says what
    shown = ", ".join(f"{n}->{'?' if j is None else j}" for n, j in enumerate(heads))
    wanted = ", ".join(f"{n}->{n // group}" for n in range(N))
    wrong = [n for n, j in enumerate(heads) if j is not None and j != n // group]
    fail("kv_head_mod" if all(j == n % K for n, j in enumerate(heads)) else "kv_head", (
        f"query head{'s' if len(wrong) > 1 else ''} {', '.join(map(str, wrong))} read the "
        f"K/V of another head group: the N // K = {group} query heads that share a K/V "
        "head are consecutive, so head n reads K/V head n // (N // K), in the index maps "
        "of k and v (and of any copy of them)."), [
        ("heads read", f"query head -> K/V head: yours {shown} · expected {wanted}"
                       + (" ('?': no K/V head's values; read past the K heads?)"
                          if None in heads else ""))])


def attention_not_rescaled(q, k, v, causal, block_kv):
    """The online softmax with acc never rescaled by alpha: acc sums each KV block's
    p @ v against the running max of its own step, l is rescaled."""
    q, k, v = f64(q, k, v)
    N, K, S = q.shape[1], k.shape[1], k.shape[2]
    k, v = np.repeat(k, N // K, axis=1), np.repeat(v, N // K, axis=1)
    s = np.einsum("bnth,bnsh->bnts", q, k) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    m = np.full(s.shape[:-1], -np.inf)
    l, acc = np.zeros(s.shape[:-1]), np.zeros(q.shape)
    for j in range(0, S, block_kv):
        block = s[..., j:j + block_kv]
        m_new = np.maximum(m, block.max(-1))
        keep = np.isfinite(m_new)
        if not keep.any():
            continue
        p = np.exp(block - np.where(keep, m_new, 0)[..., None])
        p = np.where(np.isfinite(block), p, 0)
        l = l * np.exp(np.where(np.isfinite(m), m - m_new, -np.inf)) + p.sum(-1)
        acc = acc + np.einsum("bnts,bnsh->bnth", p, v[:, :, j:j + block_kv])
        m = m_new
    return acc / l[..., None]


def kv_blocks_needed(qi, *, S, block_q, block_kv, causal) -> int:
    """The KV blocks q block ``qi`` must visit: with causal, those holding a key at or
    before its last query."""
    last_query = (qi + 1) * block_q - 1
    return min(S // block_kv, -(-(last_query + 1) // block_kv)) if causal \
        else S // block_kv


def check_kv_blocks_fetched(ran, *, S, block_q, block_kv, causal, operands=(1, 2)):
    """Skipping is bytes as well as work: each q block copies from K and from V (kernel
    operands 1 and 2) in proportion to the KV blocks it visits, so with causal a block
    near the top fetches fewer than one near the bottom. A kernel that skips the
    products of masked blocks but still copies every block in saves no traffic."""
    found = gpu_walk.walk(kernel_of(ran))
    if found is None or not causal or not found.fetched:
        return
    blocks = sorted(found.fetched)
    for operand in operands:
        copies = {block: found.fetched[block].get(operand, 0) for block in blocks}
        needed = {block: kv_blocks_needed(block[-1], S=S, block_q=block_q,
                                          block_kv=block_kv, causal=causal)
                  for block in blocks}
        most = max(blocks, key=lambda block: needed[block])
        if not copies[most]:
            continue   # not copied by TMA at all: check_loads_by_tma says so
        for block in blocks:
            if copies[block] * needed[most] > copies[most] * needed[block]:
                name = "K" if operand == operands[0] else "V"
                qi = block[-1]
                fail("kv_fetched", (
                    f"q block {qi} copies {copies[block]} tile(s) of {name} where the last "
                    f"q block, which visits {needed[most]} KV blocks, copies "
                    f"{copies[most]}: it visits only {needed[block]} KV block(s), so the "
                    "copies of the blocks past the diagonal are fetched and never used. "
                    "Skipping is the bytes too: give emit_pipeline the grid of the blocks "
                    "that count, not a pl.when around the products."),
                    [("copies", f"{name}, q block {qi}: yours {copies[block]} · in "
                                f"proportion to the KV blocks visited "
                                f"{copies[most] * needed[block] // needed[most]}")])


def check_kv_blocks_visited(ran, *, T, S, block_q, block_kv, causal):
    """Each block (b, n, qi) issues two wgmmas per KV block it visits; with causal, it
    visits only the KV blocks holding a key at or before its last query."""
    found = gpu_walk.walk(kernel_of(ran))
    if found is None:
        return
    for block, wgmmas in sorted(found.wgmmas.items()):
        qi = block[-1]
        last_query = (qi + 1) * block_q - 1
        needed = kv_blocks_needed(qi, S=S, block_q=block_q, block_kv=block_kv,
                                  causal=causal)
        if wgmmas != 2 * needed:
            visited = wgmmas / 2
            shown = f"{visited:g}" if visited == int(visited) else f"{wgmmas} wgmmas for"
            hold = "holds" if needed == 1 else "hold"
            if wgmmas > 2 * needed:
                says = (f"q block {qi} visits {shown} KV blocks where {needed} {hold} a key "
                        f"at or before its last query ({last_query}): the blocks past the "
                        "diagonal are all masked and only cost time, half the work of "
                        "causal attention. Give emit_pipeline a grid of the blocks that "
                        f"count, min(S // block_kv, cdiv((qi + 1) * block_q, block_kv)) "
                        "(a traced number of steps is fine).")
            else:
                says = (f"q block {qi} visits {shown} KV blocks where {needed} {hold} a key "
                        f"at or before its last query ({last_query}): keys it must see are "
                        "never visited. Count KV blocks, not q blocks: cdiv((qi + 1) * "
                        "block_q, block_kv) blocks of block_kv keys (block_q and block_kv "
                        "differ here).")
            fail("kv_steps", says, [
                ("kv steps", f"q block {qi}: yours {shown} · needed {needed} "
                             f"(block_q={block_q}, block_kv={block_kv}, causal={causal})")])
