"""Seqno tables shared by the unicast variants: the send window of one peer and the receive window of one peer.

`SendWindow` holds the messages sent to a peer and not yet acknowledged, by seqno (first seqno 1). `low` is the
highest seqno below which nothing is held any more (acknowledged, purged or removed one by one), so
`low + 1` is the lowest unacknowledged message whenever the window is not empty.

`ReceiveWindow` holds messages received from a peer and not yet delivered. `highest_delivered` is the last
seqno handed to the application in order; messages above it wait in `buffered` until the gap closes.
Delivered messages are not kept, so the receive window's low is its `highest_delivered`.

Both are bounded by `capacity` messages: a sender holds at most `capacity` unacknowledged messages (the next
send waits: back-pressure), so a receiver never needs a seqno above `highest_delivered + capacity` and drops it
as OUTSIDE_WINDOW (a forged or absurd seqno cannot make it buffer, or later ask for, more than that).
"""
from __future__ import annotations

NEW = "new"
DUPLICATE = "duplicate"
BELOW_WINDOW = "below_window"
OUTSIDE_WINDOW = "outside_window"


class SendWindow:
    """Unacknowledged messages to one peer."""

    __slots__ = ("msgs", "highest_sent", "low", "capacity")

    def __init__(self, capacity: int) -> None:
        self.msgs: dict[int, bytes] = {}
        self.highest_sent = 0
        self.low = 0
        self.capacity = capacity

    def has_room(self) -> bool:
        """Whether the next seqno fits: next - low <= capacity (unicast2's individual acks may leave holes
        below the highest acked: `low` is the lowest still held minus one, so holes count as held)."""
        return self.highest_sent + 1 - self.low <= self.capacity

    def append(self, payload: bytes) -> int:
        """Store `payload` under the next seqno and return that seqno."""
        self.highest_sent += 1
        self.msgs[self.highest_sent] = payload
        return self.highest_sent

    def get(self, seqno: int) -> bytes | None:
        return self.msgs.get(seqno)

    def purge_to(self, seqno: int) -> int:
        """Forget every message up to `seqno` (a cumulative ack), capped at `highest_sent`. Returns how many."""
        seqno = min(seqno, self.highest_sent)
        removed = 0
        if seqno > self.low:
            msgs = self.msgs
            for s in range(self.low + 1, seqno + 1):
                if msgs.pop(s, None) is not None:
                    removed += 1
            self.low = seqno
        self._advance()
        return removed

    def remove(self, seqno: int) -> bool:
        """Forget one message (an individual ack). Returns whether it was held."""
        if self.msgs.pop(seqno, None) is None:
            return False
        self._advance()
        return True

    def _advance(self) -> None:
        while self.low < self.highest_sent and (self.low + 1) not in self.msgs:
            self.low += 1

    def lowest(self) -> int | None:
        """The lowest unacknowledged seqno, or None when everything is acknowledged."""
        return self.low + 1 if self.msgs else None

    def __len__(self) -> int:
        return len(self.msgs)


class ReceiveWindow:
    """Messages from one peer waiting for in-order delivery."""

    __slots__ = ("highest_delivered", "highest_received", "buffered", "capacity")

    def __init__(self, capacity: int, highest_delivered: int = 0) -> None:
        self.highest_delivered = highest_delivered
        self.highest_received = highest_delivered
        self.buffered: dict[int, bytes] = {}
        self.capacity = capacity

    def add(self, seqno: int, payload: bytes) -> str:
        """Store a message; returns NEW, DUPLICATE (already buffered), BELOW_WINDOW (already delivered) or
        OUTSIDE_WINDOW (above highest_delivered + capacity: dropped, not buffered)."""
        if seqno <= self.highest_delivered:
            return BELOW_WINDOW
        if seqno > self.highest_delivered + self.capacity:
            return OUTSIDE_WINDOW
        if seqno in self.buffered:
            return DUPLICATE
        self.buffered[seqno] = payload
        if seqno > self.highest_received:
            self.highest_received = seqno
        return NEW

    def take(self, seqno: int, payload: bytes) -> tuple[str, list[tuple[int, bytes]]]:
        """`add`, then `drain` if it was new: (what `add` returns, the messages now deliverable in order)."""
        if seqno == self.highest_delivered + 1 and not self.buffered:  # in order, nothing held (capacity >= 1)
            self.highest_delivered = seqno
            if seqno > self.highest_received:
                self.highest_received = seqno
            return NEW, [(seqno, payload)]
        result = self.add(seqno, payload)
        return result, (self.drain() if result == NEW else [])

    def drain(self) -> list[tuple[int, bytes]]:
        """Remove and return the messages that are now deliverable in order."""
        out: list[tuple[int, bytes]] = []
        buffered = self.buffered
        seqno = self.highest_delivered + 1
        while seqno in buffered:
            out.append((seqno, buffered.pop(seqno)))
            seqno += 1
        self.highest_delivered = seqno - 1
        return out

    def has_gaps(self) -> bool:
        return self.highest_received > self.highest_delivered

    def missing(self, limit: int) -> list[int]:
        """Up to `limit` seqnos, lowest first, above `highest_delivered` and below `highest_received` not held."""
        out: list[int] = []
        buffered = self.buffered
        for seqno in range(self.highest_delivered + 1, self.highest_received):
            if seqno not in buffered:
                out.append(seqno)
                if len(out) >= limit:
                    break
        return out

    def rebase(self, low: int) -> int:
        """Move the window so that `low` counts as delivered; drop buffered messages up to it, and those that fall
        outside the moved window (never the case for a real sender). Returns how many were dropped."""
        dropped = [s for s in self.buffered if s <= low or s > low + self.capacity]
        for seqno in dropped:
            del self.buffered[seqno]
        self.highest_delivered = low
        self.highest_received = max(low, max(self.buffered, default=low))
        return len(dropped)
