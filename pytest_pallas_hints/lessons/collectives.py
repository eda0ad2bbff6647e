"""The collectives chapter's lesson machinery: what its tests know beyond the right answers.

* the ring of simulated chips the tests run on (``ring``): a 1-D mesh over the CPU
  devices the kit asks JAX for, or a slice of real TPUs; a JAX that cannot simulate
  the chips or their remote DMAs ends the test as "cannot be verified" (skipped);
* checks that word the chapter's findings from what the kit measured on every
  device: the kernel ran on each device, no copy lands on the device that sent it, the
  bytes the copies moved between chips are the ring's (a step too many or too few,
  the blocks travelling in another dtype, a known wrong schedule's bytes), and, where
  the values are wrong for no more specific reason, the bytes said first.
"""
import jax
import pytest

from .. import jaxcompat
from ..checking import Mismatch, check, fail
from ..frozen import np


# --- the ring -----------------------------------------------------------------------

AXIS = "x"


def ring(n, *, needs=None):
    """A 1-D mesh (axis "x") over n devices: simulated chips on a CPU, real ones on a
    TPU slice (n None: all of them). ``needs``: a feature of JAX the puzzle needs
    besides (a name ``jaxcompat.require`` knows), asked first: a JAX without it ends
    the test as "cannot be verified"."""
    if needs is not None:
        jaxcompat.require(needs)
    devices = jax.devices()
    if devices[0].platform == "cpu":
        why = jaxcompat.cpu_devices_missing(n)
        if why:
            raise jaxcompat.CannotVerify("simulated chips", why)
        jaxcompat.require("remote DMAs")
    n = len(devices) if n is None else n
    if len(devices) < max(n, 2):
        pytest.skip(f"needs a ring of {max(n, 2)} chips: this slice has {len(devices)}")
    return jax.sharding.Mesh(np.array(devices[:n]), (AXIS,))


# --- what your copies did, measured on every device ---------------------------------

def check_on_every_device(ran, n):
    """The kernel ran once on each of the n devices (inside jax.shard_map), not once."""
    if ran.program.sites and ran.program.sites[0].devices != n:
        fail("not_on_every_device", (
            f"your kernel ran once, not once on each of the {n} devices: call the "
            "pallas_call inside jax.shard_map(..., mesh=mesh), so that every device runs "
            "it for itself."))


def check_copies_leave(ran):
    """Every remote copy goes to a neighbour on the ring: not to the device that started
    it (device_id=(me,)), and not past its neighbours (straight to every device moves the
    same bytes, but is not a ring)."""
    for run, counts in zip(ran.executed, ran.counts):
        n = run.site.devices
        for target, *_ in counts.remote:
            if run.device is None or n < 2 or target is None:
                continue
            if target == run.device:
                fail("sent_to_itself", (
                    "your remote copy goes to the device that starts it (under "
                    "'devices'): device_id names the device the copy lands on, and "
                    "lax.axis_index(axis_name) is this device itself, so the copy never leaves it. "
                    "Send it to the right neighbour: device_id=(right,), from "
                    "neighbours(axis_name)."), [("devices", f"{run.device} → {target}")])
            if target not in ((run.device + 1) % n, (run.device - 1) % n):
                fail("not_a_neighbour", (
                    f"device {run.device} copies straight to device {target}, which is not "
                    "one of its neighbours on the ring: on a ring every copy goes one step, "
                    "to the right (or left) neighbour, which passes the block on at the next "
                    "step. Sending to every device at once moves the same bytes here, but on "
                    "chips wired as a ring each such copy crosses the chips between, and it "
                    "is not the lesson. Send to device_id=(right,) from neighbours(axis_name), "
                    "and forward what arrives."), [("devices", f"{run.device} → {target} "
                                                   f"(a ring of {n})")])


def check_remote_bytes(ran, expected, *, what, likely=None, travels=None):
    """Your copies moved exactly the ring's bytes from chip to chip (all devices).
    ``travels``: the dtype the travelling blocks must have (a byte count off by exactly
    a ratio of dtype sizes names it)."""
    moved = ran.remote_bytes
    if moved == expected:
        return
    facts = [("remote", f"bytes your copies moved between chips: yours {moved:,} · the "
                        f"ring's {expected:,}")]
    named = [name for name, amount in (likely or {}).items() if moved == amount]
    if len(named) == 1:
        fail(named[0], f"your copies move the bytes of a known wrong schedule "
                       f"({named[0].replace('_', ' ')}).", facts)
    if named:   # the bytes alone cannot tell these schedules apart: ask, do not tell
        fail("remote_bytes_high" if moved > expected else "remote_bytes_low", (
            f"your copies move {'more' if moved > expected else 'less'} between chips than "
            f"{what}, exactly as much as {len(named)} known wrong schedules do, which the "
            "bytes alone cannot tell apart: "
            + "; or ".join(f"{name.replace('_', ' ')}?" for name in named)),
             facts + [("schedules", ", ".join(named))])
    if travels is not None and moved and moved != expected and \
            (2 * moved in (expected, 4 * expected) or 4 * moved in (expected, 16 * expected)):
        kind = np.dtype(travels)
        ratio = moved / expected
        fail("remote_dtype", (
            f"your copies move exactly {ratio:g} times the ring's bytes: the right copies, "
            f"but the blocks that travel are {'narrower' if ratio < 1 else 'wider'} than "
            f"{kind.name} ({kind.itemsize} bytes an element). Give the buffers your copies "
            f"send and receive the dtype {kind.name}."), facts)
    if moved > expected:
        fail("remote_bytes_high", (
            f"your copies move more between chips than {what}: a step too many, a block "
            "sent twice, or more of the array than the step needs."), facts)
    fail("remote_bytes_low", (
        f"your copies move less between chips than {what}: a step is missing, or some "
        "blocks never travel (did they reach the output some other way?)."), facts)


RING_BUFFERS = 4   # a send and a receive buffer, each double-buffered at most


def check_ring_buffers(ran, block_bytes, *, n, gathered=0):
    """A ring holds a fixed number of blocks whatever N (``RING_BUFFERS`` of
    ``block_bytes``; ``gathered``: bytes a gathering kernel may stage besides, the result
    it assembles): a buffer that has been read is used again, which is what the ready
    semaphore is for. A buffer per step needs no semaphore and holds N blocks."""
    from .. import footprint

    most = RING_BUFFERS * block_bytes + gathered
    for site in ran.program.sites:
        found = footprint.held(site.call)
        if found.total > most:
            fail("ring_buffers", (
                f"your kernel {found.kernel} keeps {footprint._size(found.total)} of buffers "
                f"of its own on N = {n} devices, {found.total / block_bytes:.3g} blocks of "
                "partial sums: its memory grows with N. A ring passes one block a step and "
                "uses a buffer again once the neighbour has read it; a REGULAR semaphore "
                "signalled by the reader says when. Keep one buffer to send from and one to "
                f"receive into (at most {RING_BUFFERS} blocks whatever N), not one per step."),
                [("buffers", f"{found.largest()} · a ring's at most "
                             f"{footprint._size(most)}")], name=found.kernel)


def check_values_or_bytes(ran, expected, moved, **options):
    """check(ran, expected, **options); where the values are wrong and nothing more
    specific than that can be said of them, the bytes the copies moved first (``moved``):
    a step too many or too few, or a dtype that does not travel, is named there."""
    try:
        check(ran, expected, **options)
    except Mismatch as wrong:
        if wrong.findings()[0].kind == "values":
            moved()
        raise
