"""Collectives: several chips, remote DMAs, rings.

Run `pytest exercises/test_collectives.py` after every edit; add `-k <puzzle>`
for one puzzle and `--hint` when stuck. Replace each `raise NotImplementedError`
with your code; keep the signatures.

The mental model of this chapter
--------------------------------
A model too big for one chip is split across many: a TPU slice is chips wired
into rings (ICI links, each chip to its neighbours). Every chip runs the same
program on its own part of the data, and now and then the chips trade parts:
an all-gather (everyone gets everyone's part), a reduce-scatter (everyone gets
one part of the sum), an all-reduce (everyone gets the whole sum). jax.lax
gives these for free; this chapter writes them as kernels, because the
fastest layers overlap them with compute, which only a kernel can schedule.

On a laptop the chips are simulated: the kit asks JAX for 8 CPU devices, and
Pallas's TPU interpret mode runs one copy of your kernel per device, with
remote DMAs and semaphores between them, as on a slice.

    jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x)

        x  [ shard 0 | shard 1 | shard 2 | shard 3 ]   split along "x"
              │         │         │         │
           device 0  device 1  device 2  device 3      fn(its shard) on each
              │         │         │         │
        out [ out 0  |  out 1  |  out 2  |  out 3  ]   put back together

Inside fn, and inside a kernel it calls, lax.axis_index("x") is this
device's number and lax.axis_size("x") how many there are. A kernel reaches
another chip only through DMAs and semaphores:

    me                                    right = (me + 1) % N
    ┌──────────────┐   remote DMA         ┌──────────────┐
    │ src ─────────┼──────────────────────┼──▶ dst       │
    │ send_sem  ◀──┤ (counts what left)   │  recv_sem ◀──┤ (counts what landed)
    └──────────────┘                      └──────────────┘

* pltpu.make_async_remote_copy(src, dst, send_sem, recv_sem, device_id=...)
  copies our src into the dst ref *of the device device_id* (its copy of the
  same kernel operand). .start() sends; .wait() waits on both semaphores: our
  send has left, and the copy that our left neighbour (running the very same
  line) sent into *our* dst has landed.
* pl.semaphore_signal(sem, 1, device_id=...) adds 1 to that device's sem;
  pl.semaphore_wait(sem, 1) waits until ours holds 1, and takes it. A REGULAR
  semaphore (pltpu.SemaphoreType.REGULAR) is a counter chips use to say "I am
  ready"; a DMA semaphore counts bytes.
* A chip writes into another only once that one has said it is in the kernel:
  a kernel starts with a barrier, pltpu.get_barrier_semaphore(), signalled by
  the neighbours that will write into you, as JAX's own collective kernels do.
  (Mosaic also synchronises the chips before any kernel that communicates,
  unless pltpu.CompilerParams(skip_device_barrier=True) turns that off; the
  explicit handshake is what this chapter teaches, and what a kernel without
  the default relies on.) Such a kernel gets compiler_params=
  pltpu.CompilerParams(collective_id=0).

Three promises keep a collective correct, and the tests hold you to them.
Before your kernel runs, the kit walks it on every device together: a wait
no device will satisfy (a TPU would hang), a copy into a device that has not
said it is in the kernel, a copy into a buffer its owner may still be
reading, and a copy never waited on either side are named with their lines.
While it runs, interpret mode reports a read of a buffer whose copy has not
landed as a race. And the bytes your copies move between chips are counted:
each collective moves what its ring moves, no more.

Dimension letters: N devices on the ring, D features; M rows of a shard, K
and F a matmul's inner and output dims.

The public functions of this chapter each run inside jax.shard_map over a
1-D mesh axis, take the local shard and return the local result:
ring_shift(x, *, axis_name), all_gather(x, *, axis_name), reduce_scatter(x,
*, axis_name), all_reduce(x, *, axis_name), all_gather_matmul(x, w, *,
axis_name) and shift_add(x, *, axis_name), equal to lax.ppermute,
lax.all_gather(tiled=True), lax.psum_scatter(tiled=True), lax.psum, an
all-gather followed by x @ w, and x plus lax.ppermute(x).
"""
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec


# 1. collectives.device_ids — simulated chips, one kernel per device -------------

def neighbours(axis_name):
    """(left, right): the numbers of the devices before and after this one on the
    ring of mesh axis axis_name, as int32 scalars. Call it inside a kernel (or any
    function that runs under jax.shard_map).

        device:   0    1    2    3        N = 4
        left:     3    0    1    2        the ring closes: 0's left is N - 1
        right:    1    2    3    0

    lax.axis_index(axis_name) is this device's number, lax.axis_size(axis_name)
    is N (a Python int). Mind the wrap-around on the left: lax.rem, like C's %,
    keeps the sign of its first operand, so -1 rem 4 is -1, a device that does
    not exist. Every later puzzle calls this function.
    """
    raise NotImplementedError


def device_ids_kernel(o_ref, *, axis_name):
    """Store (left, me, right) into o_ref (1, 3) int32, in SMEM: this device's row.

    A kernel with no input: what it computes comes from where it runs. The same
    kernel runs on every device, and lax.axis_index gives each its own number.
    o_ref lives in SMEM, the scalar memory: store one scalar at a time,
    o_ref[0, j] = value.
    """
    raise NotImplementedError


def device_ids(mesh, *, axis_name):
    """The [N, 3] int32 table whose row d is (left, d, right), as device d sees them.

    mesh: a 1-D jax.sharding.Mesh whose single axis is axis_name (the tests build
    it from the CPU's simulated devices: jax.sharding.Mesh(devices, ("x",))).

    Every device computes its own row, in its own kernel. Nothing is split here,
    so the function jax.shard_map runs takes no argument (in_specs=()) and
    returns this device's (1, 3) row; out_specs=PartitionSpec(axis_name) stacks
    the rows of the N devices along the first dim, in device order:

        jax.shard_map(fn, mesh=mesh, in_specs=..., out_specs=..., check_vma=False)()

    (check_vma=False: JAX cannot see inside a kernel, so it does not check that
    each device's output really differs.) The call inside: a pallas_call with no
    inputs, an int32 (1, 3) output, and out_specs=pl.BlockSpec(memory_space=
    pltpu.SMEM) so that the kernel can store scalars into it.
    """
    raise NotImplementedError


# 2. collectives.ring_shift — a remote DMA to the right neighbour -----------------

def ring_shift_kernel(x_ref, o_ref, send_sem, recv_sem, *, axis_name):
    """Copy this device's x into the o of its right neighbour.

    x_ref, o_ref: this device's shard and output, both left in HBM (the copy goes
    from HBM to the neighbour's HBM, nothing passes through VMEM); send_sem,
    recv_sem: two DMA semaphores.

        device:  0      1      2      3
        x:       a      b      c      d
                  ╲      ╲      ╲      ╲    (3's goes round to 0)
        o:       d      a      b      c

    First the barrier. You will write into your right neighbour's o_ref, so it
    must have entered this kernel; your left neighbour will write into yours,
    so tell it you have:

        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=...)  # to whom? a tuple: (id,)
        pl.semaphore_wait(barrier, ...)                  # how many signals come?

    Then the copy: make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem,
    device_id=...), started, then waited. The device_id is a tuple of mesh
    coordinates, one per mesh axis: here (a number,). .wait() returns once our
    copy has left and the left neighbour's has landed in our o_ref.
    """
    raise NotImplementedError


def ring_shift(x, *, axis_name):
    """lax.ppermute(x, axis_name, [(i, (i + 1) % N) for i in range(N)]): every shard
    moves one device to the right. Called inside jax.shard_map; x is the local shard,
    any shape and dtype.

    Both x and the output stay in HBM (pl.BlockSpec(memory_space=pl.ANY) for each);
    the kernel gets two DMA semaphores in scratch_shapes, and, because it uses the
    barrier semaphore, compiler_params=pltpu.CompilerParams(collective_id=0).
    """
    raise NotImplementedError


# 3. collectives.all_gather — N - 1 steps around the ring -------------------------

def all_gather_kernel(x_ref, o_ref, copy_sem, send_sem, recv_sems, *, axis_name):
    """o_ref [N * M, ...] = every device's x [M, ...], in device order.

    x_ref, o_ref: in HBM; copy_sem: a DMA semaphore for a local copy;
    send_sem: one for sending; recv_sems: an array of N - 1 DMA semaphores.

    Step 0 puts your own block in place (a local copy, x_ref into o's block
    me). Then the ring: at every step each device passes one block to its right
    neighbour, into the same block of the neighbour's o. Which one? The one that
    arrived at the step before (at step 0, your own):

                   o blocks:   0    1    2    3
        device 1, start:       .    B    .    .
                  step 0:      A    B    .    .     sent B, received A
                  step 1:      A    B    .    D     sent A, received D
                  step 2:      A    B    C    D     sent D, received C

    After N - 1 steps every block has gone round to every device: N - 1, not N
    (one more step would send each device the block it started with).

    A block of o is o_ref.at[pl.ds(start_row, M)]. A loop over the steps:
    lax.fori_loop (the step number is traced, so compute block numbers with
    lax.rem, and keep them >= 0 as in neighbours).

    Receive semaphores: your left neighbour does not wait for you before its
    next send, so two of its copies may be in flight into you at once. On one
    semaphore, your wait could return when the *later* one has landed, and you
    would pass on a block that is not there yet. Give every step its own:
    recv_sems.at[step].
    """
    raise NotImplementedError


def all_gather(x, *, axis_name):
    """lax.all_gather(x, axis_name, tiled=True): [N * M, ...] for the local x [M, ...].
    Called inside jax.shard_map.

    x and the output stay in HBM. Scratch: a DMA semaphore for the local copy, one
    for the sends, and pltpu.SemaphoreType.DMA((N - 1,)) for the receives (N - 1
    is 0 on a ring of one device: ask for at least one). The barrier, as in
    ring_shift: collective_id=0.
    """
    raise NotImplementedError


# 4. collectives.reduce_scatter — add, pass on, N - 1 times ------------------------

def reduce_scatter_kernel(x_ref, o_ref, send_buf, recv_buf, send_sem, recv_sem, ready_sem,
                          *, axis_name):
    """o_ref (M, D) = block `me` of the sum over all devices of their x [N * M, D].

    x_ref [N * M, D], o_ref (M, D): in VMEM; send_buf, recv_buf (M, D) float32:
    VMEM scratch; send_sem, recv_sem: DMA semaphores; ready_sem: a REGULAR one.

    Device d must end with Σ_e x_e[block d]. The ring builds each sum on the
    way: a partial sum travels right, and every device it passes adds its own
    x block to it. With N = 4, the partial sum of block 3 starts on device 0:

        step 0:  device 0 sends x0[3]              to device 1
        step 1:  device 1 adds x1[3], sends        to device 2
        step 2:  device 2 adds x2[3], sends        to device 3
        end:     device 3 adds x3[3]: the whole sum of block 3, on device 3

    Every device does this at once, each for another block: at step s, device
    me sends the partial sum of block (me - s - 1) mod N, and what it receives
    is the one it sends next. Before the first step send_buf holds your x block
    (me - 1) mod N; after each step send_buf = recv_buf + your next x block; after
    N - 1 steps send_buf holds the whole sum of your own block, me.

    Sums are float32 (send_buf, recv_buf), whatever x's dtype; cast when you store.

    One buffer receives every step, and that is the trap: your left neighbour
    could send its next partial sum into your recv_buf while you are still
    reading the last one. So the receiver says when it is done: after reading
    recv_buf it signals ready_sem on its left neighbour, and before each send
    but the first, a device waits for that signal from its right neighbour.
    Signal only when a send will follow (there are N - 2 of those), so that no
    signal is left unwaited when the kernel ends: pl.when(condition) runs a
    function only when the traced condition holds. (A receive buffer per step
    would need no signal, and N blocks of memory: the tests allow a ring at
    most 4 blocks of buffers of its own, whatever N.)
    """
    raise NotImplementedError


def reduce_scatter(x, *, axis_name):
    """lax.psum_scatter(x, axis_name, tiled=True): (M, D) for the local x [N * M, D].
    Called inside jax.shard_map; x's leading dim is a multiple of N.

    x and the output in VMEM (the default BlockSpecs: no grid, whole arrays).
    Scratch: two float32 (M, D) VMEM buffers, two DMA semaphores and one
    pltpu.SemaphoreType.REGULAR; collective_id=0 for the barrier.
    """
    raise NotImplementedError


# 5. collectives.all_reduce — reduce-scatter, then all-gather ---------------------

def all_reduce(x, *, axis_name):
    """lax.psum(x, axis_name): the sum of every device's x [N * M, D], on every device.
    Called inside jax.shard_map; x's leading dim is a multiple of N.

    No new kernel: puzzles 3 and 4 compose. Reduce-scatter leaves block d of the
    sum on device d; all-gather then hands every block to every device.

    Why not send all of x to everyone and add? Count what leaves one chip:

        everyone to everyone:  (N - 1) · |x|
        reduce-scatter:        (N - 1) · |x| / N      (N - 1 steps of one block)
        all-gather:            (N - 1) · |x| / N
        together:              2 (N - 1) / N · |x|    < 2 |x|, however large N

    On a ring every link is busy at every step: this is the bandwidth-optimal
    all-reduce, the one behind data-parallel training.
    """
    raise NotImplementedError


# 6. collectives.collective_matmul — multiply what arrived while the next block travels

def all_gather_matmul_kernel(x_ref, w_ref, o_ref, blocks, send_sem, recv_sems, *,
                             axis_name):
    """o_ref [N * M, F] = all_gather(x) @ w, each block multiplied as it arrives.

    x_ref (M, K): this device's rows; w_ref (K, F): the same on every device;
    o_ref (N * M, F): all in VMEM. blocks (N, M, K): VMEM scratch for every
    device's x; send_sem a DMA semaphore, recv_sems N - 1 of them.

    In a tensor-parallel layer x arrives sharded by rows, and the matmul needs
    all of it. Gathering first, then multiplying, leaves the MXU idle while the
    ring runs. But block i of the output needs only block i of x: multiply each
    block as soon as it is here, while the next one travels.

        DMA:   send block me   │ send block me-1 │ send block me-2 │
        MXU:   block me @ w    │ block me-1 @ w  │ block me-2 @ w  │ block me-3 @ w

    Puzzle 3's ring, with blocks in VMEM: put your x into blocks[me]; at step s,
    start the copy that passes block (me - s) mod N on, *then* multiply that
    block into its rows of o, *then* wait. After the loop, one block has arrived
    that was never multiplied: multiply it too.

    jnp.dot(a, b, preferred_element_type=jnp.float32) accumulates in float32;
    cast the product to o_ref's dtype as you store it.
    """
    raise NotImplementedError


def all_gather_matmul(x, w, *, axis_name):
    """lax.all_gather(x, axis_name, tiled=True) @ w: [N * M, F] for the local x (M, K)
    and w (K, F), replicated. Called inside jax.shard_map.

    Everything in VMEM (default BlockSpecs); scratch: (N, M, K) VMEM of x's dtype,
    a DMA semaphore and pltpu.SemaphoreType.DMA((N - 1,)) (at least one);
    collective_id=0 for the barrier.
    """
    raise NotImplementedError


# 7. collectives.shift_add — the same ideas in today's API: pl.kernel over a mesh --

def shift_add_kernel(x_ref, o_ref, x_vmem, arrived, send_sem, recv_sem, *, axis_name):
    """o = x + the left neighbour's x, written the way the current Pallas TPU docs
    write kernels.

    Why a sixth way to move a shard: since JAX 0.11 the docs' quickstart writes
    kernels with pl.kernel instead of pl.pallas_call. There is no grid and there
    are no BlockSpecs: x_ref and o_ref stay in HBM, and the body moves what it
    needs into VMEM itself. This is the sharded halo exchange in its smallest
    form (a sequence-parallel convolution needs its left neighbour's rows):

        device:  0        1        2        3
        x:       a        b        c        d
        o:       a + d    b + a    c + b    d + c

    x_ref, o_ref: this device's shard and output, in HBM. x_vmem, arrived: two
    VMEM buffers of x's shape and dtype (scratch_types, in order); send_sem,
    recv_sem: DMA semaphores.

    * pltpu.sync_copy(src, dst) copies and returns when the copy has landed:
      the way between HBM and VMEM in this style, both directions.
    * pltpu.async_remote_copy(src, dst, send_sem, recv_sem, device_id=...)
      starts a remote copy, as make_async_remote_copy(...).start() did, and
      returns the descriptor to .wait() on. Its dst may be a VMEM buffer: the
      same buffer of the device device_id.

    The barrier first, as in ring_shift (you write into the right neighbour's
    `arrived`). Then start the remote copy, and bring your own shard into VMEM
    while it travels; wait; add; copy the sum out to o_ref.
    """
    raise NotImplementedError


def shift_add(x, *, axis_name):
    """x + lax.ppermute(x, axis_name, [(i, (i + 1) % N)]), as one pl.kernel. Called
    inside jax.shard_map; x is the local shard, any shape and dtype.

        pl.kernel(body, out_type=jax.ShapeDtypeStruct(...),
                  mesh=pltpu.TensorCoreMesh(axis_name="core", num_cores=1),
                  scratch_types=[...], compiler_params=...)(x)

    The mesh is the cores of one device the body runs on (one TensorCore here;
    the devices of the ring are shard_map's mesh, as before). scratch_types
    lists the body's VMEM buffers and semaphores, handed to it after x_ref and
    o_ref; the barrier still needs pltpu.CompilerParams(collective_id=0).
    """
    raise NotImplementedError
