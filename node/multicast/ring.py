"""NAKACK4's fixed ring buffers: the send window of the local sender and the receive window of one sender.

A `Ring` has `capacity` slots; seqno s lives in slot (s - offset - 1) mod capacity, so at most `capacity`
consecutive seqnos are held at a time and a newer seqno overwrites the one `capacity` below it.

`SendWindow` (the seed: low = highest acked by everyone, high = highest sent): a new seqno fits while
`seqno - low <= capacity`; otherwise the sender must wait for acks (blocked). `set_low(to)` moves `low` to the
minimum ack (a rise frees room); `release(to)` forgets payloads up to `to` (not above `low`). Keeping payloads
between the release point and `low` is how the layer holds messages for members that left but may come back
(see nakack4.py).

`ReceiveWindow` (low = highest delivered or given up, high = highest received): accepts
`low < seqno <= low + capacity` (JGroups' FixedBuffer), drops the rest as below or outside the window, and drains
in-order runs for delivery. `skip_to` gives up seqnos (low jumps up); `rewind_to` takes back seqnos given up but
never delivered (low goes down again; the caller keeps it at or above what it delivered). Its `high` never
exceeds `low + capacity`, so every walk over it (drain, missing, skip_to, rewind_to) is O(capacity) whatever
seqnos a datagram names.
"""
from __future__ import annotations

NEW = "new"
DUPLICATE = "duplicate"
BELOW_WINDOW = "below_window"
OUTSIDE_WINDOW = "outside_window"


class Ring:
    """`capacity` slots addressed by seqno."""

    __slots__ = ("capacity", "offset", "_seqnos", "_payloads")

    def __init__(self, capacity: int, offset: int = 0) -> None:
        if capacity <= 0:
            raise ValueError(f"ring capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.offset = offset
        self._seqnos: list[int] = [0] * capacity
        self._payloads: list[bytes | None] = [None] * capacity

    def _slot(self, seqno: int) -> int:
        return (seqno - self.offset - 1) % self.capacity

    def put(self, seqno: int, payload: bytes) -> None:
        slot = self._slot(seqno)
        self._seqnos[slot] = seqno
        self._payloads[slot] = payload

    def get(self, seqno: int) -> bytes | None:
        slot = self._slot(seqno)
        return self._payloads[slot] if self._seqnos[slot] == seqno else None

    def has(self, seqno: int) -> bool:
        slot = self._slot(seqno)
        return self._seqnos[slot] == seqno and self._payloads[slot] is not None

    def put_new(self, seqno: int, payload: bytes) -> bool:
        """`put` unless the ring holds `seqno` already (then False): `has` and `put` in one slot lookup."""
        slot = (seqno - self.offset - 1) % self.capacity
        if self._seqnos[slot] == seqno and self._payloads[slot] is not None:
            return False
        self._seqnos[slot] = seqno
        self._payloads[slot] = payload
        return True

    def pop_run(self, first: int) -> list[tuple[int, bytes]]:
        """Pop `first`, `first + 1`, ... while the ring holds them; returns them in order (a receive window's
        drain: one loop without a method call per message)."""
        out: list[tuple[int, bytes]] = []
        seqnos, payloads, capacity = self._seqnos, self._payloads, self.capacity
        seqno = first
        slot = (seqno - self.offset - 1) % capacity
        while seqnos[slot] == seqno:
            payload = payloads[slot]
            payloads[slot] = None
            seqnos[slot] = 0
            if payload is None:
                break
            out.append((seqno, payload))
            seqno += 1
            slot = slot + 1 if slot + 1 < capacity else 0
        return out

    def pop(self, seqno: int) -> bytes | None:
        slot = self._slot(seqno)
        if self._seqnos[slot] != seqno:
            return None
        payload = self._payloads[slot]
        self._payloads[slot] = None
        self._seqnos[slot] = 0
        return payload


class SendWindow:
    """The local sender's messages: `low` acked by every receiver, `high` sent, payloads above `released` held."""

    __slots__ = ("ring", "capacity", "low", "high", "released")

    def __init__(self, capacity: int) -> None:
        self.ring = Ring(capacity)
        self.capacity = capacity
        self.low = 0
        self.high = 0
        self.released = 0

    def has_room(self) -> bool:
        """Whether the next seqno fits: next - low <= capacity."""
        return self.high + 1 - self.low <= self.capacity

    def append(self, payload: bytes) -> int:
        """Store `payload` under the next seqno and return it. The caller checks `has_room` first."""
        self.high += 1
        self.ring.put(self.high, payload)
        return self.high

    def get(self, seqno: int) -> bytes | None:
        """The payload of `seqno` if still held (not released, not overwritten)."""
        if seqno <= self.released or seqno > self.high:
            return None
        return self.ring.get(seqno)

    def oldest_held(self) -> int:
        """The lowest seqno still held (high + 1 when nothing is)."""
        return max(self.released + 1, self.high - self.capacity + 1, 1)

    def set_low(self, to: int) -> bool:
        """Everyone has `to` (the minimum ack): move `low` there, within [released, high]. It goes down when a
        receiver comes back with an older ack (what it lacks is still held). Returns whether it rose."""
        to = max(min(to, self.high), self.released)
        rose = to > self.low
        self.low = to
        return rose

    def release(self, to: int) -> int:
        """Forget payloads up to `to` (never above `low`). Returns how many slots were freed."""
        to = min(to, self.low)
        freed = 0
        start = max(self.released + 1, self.high - self.capacity + 1)
        for seqno in range(start, to + 1):
            if self.ring.pop(seqno) is not None:
                freed += 1
        self.released = max(self.released, to)
        return freed

    @property
    def unacked(self) -> int:
        return self.high - self.low


class ReceiveWindow:
    """Messages of one sender: `low` (highest delivered or skipped), `high` (highest received or announced)."""

    __slots__ = ("ring", "capacity", "low", "high", "buffered")

    def __init__(self, capacity: int, low: int = 0) -> None:
        self.ring = Ring(capacity, offset=low)
        self.capacity = capacity
        self.low = low
        self.high = low
        self.buffered = 0

    def add(self, seqno: int, payload: bytes) -> str:
        """NEW, DUPLICATE, BELOW_WINDOW (already delivered) or OUTSIDE_WINDOW (beyond low + capacity)."""
        if seqno <= self.low:
            return BELOW_WINDOW
        if seqno > self.low + self.capacity:
            return OUTSIDE_WINDOW
        if not self.ring.put_new(seqno, payload):
            return DUPLICATE
        self.buffered += 1
        if seqno > self.high:
            self.high = seqno
        return NEW

    def drain(self) -> list[tuple[int, bytes]]:
        """Remove and return the messages now deliverable in order; `low` follows."""
        out = self.ring.pop_run(self.low + 1)
        self.low += len(out)
        self.buffered -= len(out)
        return out

    def note_highest(self, seqno: int) -> None:
        """The sender says it sent up to `seqno`: anything missing up to it is a gap (capped by the capacity)."""
        self.high = max(self.high, min(seqno, self.low + self.capacity))

    def has_gaps(self) -> bool:
        return self.high > self.low + self.buffered

    def missing(self, limit: int) -> list[int]:
        """Up to `limit` seqnos, lowest first, in (low, high] not held."""
        out: list[int] = []
        ring = self.ring
        for seqno in range(self.low + 1, self.high + 1):
            if not ring.has(seqno):
                out.append(seqno)
                if len(out) >= limit:
                    break
        return out

    def skip_to(self, low: int) -> tuple[list[tuple[int, bytes]], int]:
        """The sender no longer holds anything up to `low`: return the held messages up to it in order (to deliver
        across the gaps) and how many seqnos are lost; then `low` counts as delivered. Looks at the ring's slots
        only (held seqnos lie in (low, low + capacity]), never at every seqno of the gap: O(capacity) however far
        `low` is."""
        if low <= self.low:
            return [], 0
        held: list[tuple[int, bytes]] = []
        ring = self.ring
        for seqno in range(self.low + 1, min(low, self.low + self.capacity) + 1):
            payload = ring.pop(seqno)
            if payload is not None:
                held.append((seqno, payload))
        lost = low - self.low - len(held)
        self.buffered -= len(held)
        self.low = low
        self.high = max(self.high, low)
        return held, lost

    def rewind_to(self, low: int) -> int:
        """Take back seqnos given up by a skip: `low` goes down to `low` (the caller guarantees nothing above it
        was delivered). Held messages that still fit in (low, low + capacity] keep their slots, the others go
        (they are asked for again); `high` becomes the highest held. O(capacity). Returns how many seqnos were
        reopened (0 if `low` is not below the current low)."""
        if low >= self.low:
            return 0
        ring = self.ring
        held: list[tuple[int, bytes]] = []
        for seqno in range(self.low + 1, min(self.high, self.low + self.capacity) + 1):
            payload = ring.pop(seqno)
            if payload is not None:
                held.append((seqno, payload))
        reopened = self.low - low
        self.low = self.high = low
        self.buffered = 0
        for seqno, payload in held:
            if seqno <= low + self.capacity:
                ring.put(seqno, payload)
                self.buffered += 1
                self.high = seqno
        return reopened
