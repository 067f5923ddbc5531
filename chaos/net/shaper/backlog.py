"""What one shaped link's queue holds, counted as netem counts its queue: the release times of the packets the
shaper holds for one destination (delayed, waiting for their turn at the rate, their duplicates, messages that
rules put off), so that the engine keeps at most the link's `limit_pkts` waiting and drops what comes beyond.

A packet leaves the count at its release time: the times are a heap, and the ones due by now are popped when
the next packet toward that destination asks (each time is pushed and popped once: O(log n) per packet at most,
O(1) in the usual case of times that only grow, rate and fixed delay). Pure: time comes from the caller.
"""
from __future__ import annotations

from heapq import heappop, heappush


class Backlog:
    """The release times (s) of the packets held for one destination that had not left when last asked."""

    __slots__ = ("_due_s",)

    def __init__(self) -> None:
        self._due_s: list[float] = []

    def held(self, now_s: float) -> int:
        """Packets still waiting at `now_s` (those due by then have left)."""
        due_s = self._due_s
        while due_s and due_s[0] <= now_s:
            heappop(due_s)
        return len(due_s)

    def hold(self, at_s: float) -> None:
        """Count a packet that waits until `at_s` (the caller has made sure it fits)."""
        heappush(self._due_s, at_s)
