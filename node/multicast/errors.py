"""Errors of the multicast layer (part of the one `node.errors.SplitlabError` hierarchy)."""
from __future__ import annotations

from node.errors import SplitlabError, UsageError


class WindowFull(SplitlabError):
    """The send window holds `capacity` unacknowledged messages: the sender must wait.

    Raised by a `send` request instead of sending; nothing was sent and the message was not taken. The layer
    emits `window_unblocked` when acks (or a view without a silent member) free room; retry then.
    """

    def __init__(self, proto: str, next_seqno: int, low: int, capacity: int) -> None:
        super().__init__(f"{proto}: send window full (next seqno {next_seqno}, everyone has acked up to {low}, "
                         f"capacity {capacity})", hint="wait for window_unblocked, then send again")
        self.next_seqno = next_seqno
        self.low = low
        self.capacity = capacity


class SenderClosed(UsageError):
    """The multicast sender was closed (`close` request): sends fail cleanly, blocked senders were woken."""
