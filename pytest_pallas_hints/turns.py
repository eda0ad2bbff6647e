"""Simulated devices that take turns: the chips of a mesh (walk.py), the warpgroups of a
GPU block (gpu_walk.py).

Each participant is a generator that runs until it waits for something another
participant has not done yet (bytes a remote copy has not sent, a barrier no one has
arrived at), and then yields a ``Wait`` that says when it may go on. ``take_turns``
resumes the participants one at a time, in order, each whose wait is over, until all
have finished or none can go on: a deadlock, whose waits it returns (a real chip would
hang there). One thread, no locks: the order is fixed, and a participant's waits are
its own, so what each wait receives does not depend on who ran first.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Generator


@dataclasses.dataclass
class Wait:
    """What a participant waits for: ``ready()`` says whether it may go on; ``what`` is
    kept for the words, should it never may."""
    ready: Callable[[], bool]
    what: object = None


def take_turns(participants: list[Generator]) -> list[tuple[int, Wait]]:
    """Runs every participant until each finished: [] then. Where every participant left
    waits for something no one will do, (its position, its Wait) for each of them. An
    exception in a participant ends the turns: it is raised."""
    live = dict(enumerate(participants))
    waiting: dict[int, Wait] = {}
    while live:
        moved = False
        for n, participant in list(live.items()):
            wait = waiting.get(n)
            if wait is not None and not wait.ready():
                continue
            moved = True
            try:
                waiting[n] = next(participant)   # runs until it waits again
            except StopIteration:
                del live[n]
                waiting.pop(n, None)
        if not moved:
            return [(n, waiting[n]) for n in live]
    return []


def finished(steps: Generator):
    """The value of a generator that never waits (a walk outside a mesh)."""
    try:
        wait = next(steps)
    except StopIteration as done:
        return done.value
    raise RuntimeError(f"a walk with no one to take turns with waits: {wait.what!r}")
