"""The local sender's bookkeeping in NAKACK4 besides its window: acks of the receivers, members that left,
blocked time, and the send lock of `send_atomic`.

- `acks`: highest seqno each current receiver acknowledged; `low` of the send window is their minimum.
- `departed`: receivers that left the view with their last ack; they no longer hold `low` back (a blocked
  sender is released) but their unacknowledged messages are kept (not released) for `retain_departed_ms`.
- `Blocking`: since when the window is full, how often and how long it was.
- `SendLock`: models application threads for the `stall_ms` test hook: without `send_atomic` a thread takes
  its seqno and is then descheduled for `stall_ms` before its message goes out (others overtake it); with
  `send_atomic` the seqno is taken and the message sent under one lock, so other threads queue behind it.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class Departed:
    """A receiver that left the view: its last ack and when it left."""

    ack: int
    since_s: float


@dataclass
class Blocking:
    """Blocked-sender accounting (blocked = the window is full; the next send must wait)."""

    since_s: float | None = None
    count: int = 0
    total_s: float = 0.0

    def block(self, now_s: float) -> bool:
        """Mark blocked; returns whether it was not blocked before."""
        if self.since_s is not None:
            return False
        self.since_s = now_s
        self.count += 1
        return True

    def unblock(self, now_s: float) -> float | None:
        """Mark unblocked; returns the blocked time in seconds, or None if it was not blocked."""
        if self.since_s is None:
            return None
        blocked_s = now_s - self.since_s
        self.total_s += blocked_s
        self.since_s = None
        return blocked_s

    def to_state(self, now_s: float) -> dict:
        current = 0.0 if self.since_s is None else now_s - self.since_s
        return {"blocked": self.since_s is not None, "blocked_for_ms": round(current * 1000),
                "blocked_count": self.count, "blocked_ms_total": round((self.total_s + current) * 1000)}


@dataclass
class SendLock:
    """Sends waiting for the lock (`send_atomic`), and the seqno of the send holding it (None: free)."""

    holder: int | None = None
    queue: deque = field(default_factory=deque)  # (payload, stall_s)

    @property
    def busy(self) -> bool:
        return self.holder is not None or bool(self.queue)
