"""A jammed link's holding queue, pure: what crosses a jammed cut is kept (up to a cap, the oldest dropped beyond
it) and handed back at the heal, in the order it came (`fifo`) or shuffled by a seeded generator (`shuffle`).

One implementation for both backends of a jammed partition: the simulator's network (`node.sim.network`) holds
datagrams in it, the NFQUEUE shaper (`chaos.net.shaper.engine`) whole IP packets.
"""
from __future__ import annotations

import random
from collections import deque
from typing import Generic, Iterable, TypeVar

from node.errors import UsageError

RELEASES = ("fifo", "shuffle")
MAX_HELD = 100_000  # per jammed link: without a cap of its own, a link holds at most this many (oldest dropped)

T = TypeVar("T")


def check(release: str, cap: int | None) -> None:
    """Raise `UsageError` unless `release` is one of RELEASES and `cap` is None or 1..MAX_HELD."""
    if release not in RELEASES:
        raise UsageError(f"release must be one of {', '.join(RELEASES)}, got {release!r}")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_HELD):
        raise UsageError(f"cap must be a whole number of packets in 1..{MAX_HELD}, got {cap!r}")


class JamQueue(Generic[T]):
    """What one jammed link holds. `held` counts everything taken in, `dropped` what the cap pushed out."""

    def __init__(self, release: str = "fifo", cap: int | None = None) -> None:
        check(release, cap)
        self.release_order = release
        self.limit = cap if cap is not None else MAX_HELD
        self.items: deque[T] = deque()
        self.held = 0
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.items)

    def hold(self, item: T) -> T | None:
        """Keep `item`; returns the oldest item pushed out by the cap (None when there was room)."""
        self.items.append(item)
        self.held += 1
        if len(self.items) > self.limit:
            self.dropped += 1
            return self.items.popleft()
        return None

    def release(self, rng: random.Random) -> list[T]:
        """Everything held, in release order (`shuffle` draws from `rng`); the queue is empty afterwards."""
        out = list(self.items)
        self.items.clear()
        if self.release_order == "shuffle":
            rng.shuffle(out)
        return out


def release_all(queues: Iterable[JamQueue[T]], rng: random.Random) -> list[T]:
    """What every queue holds, queue by queue, each in its own release order."""
    return [item for queue in queues for item in queue.release(rng)]


def outcome(queues: Iterable[JamQueue[T]]) -> dict[str, int]:
    """What jams released whole did in their lifetime: `held` (taken in), `released` (let go at the heal) and
    `dropped` (pushed out by the cap); a jammed partition's `fault_end` records it."""
    queues = list(queues)
    held, dropped = sum(q.held for q in queues), sum(q.dropped for q in queues)
    return {"held": held, "released": held - dropped, "dropped": dropped}
