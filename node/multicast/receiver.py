"""Per-sender receive records of NAKACK4: the ring window plus what the retransmit task needs to know.

An entry is *active* while its sender is in the view; when the sender leaves, the entry is *retained* (kept,
still receiving and delivering what arrives, but asking for nothing) until the sender returns or
`retain_departed_ms` passes. `requested` remembers seqnos asked for (when, how often) until their original
arrives (which makes the request a spurious one) or they fall a capacity behind the window; a seqno is asked
for again only after a backoff (`ask_again_at`), so answers still in flight are not asked for twice.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from node.multicast.ring import ReceiveWindow


@dataclass
class RecvEntry:
    """What this member holds of one sender's multicasts."""

    window: ReceiveWindow
    retained_since_s: float | None = None  # the sender left the view at this time (None: active)
    delivered_since_ack: int = 0
    ack_pending: bool = False              # the sender evidently lacks our ack (duplicates, HIGHEST at or below low)
    requested: dict[int, tuple[float, int]] = field(default_factory=dict)  # seqno -> (last asked at, times)
    counters: Counter = field(default_factory=Counter)

    @property
    def active(self) -> bool:
        return self.retained_since_s is None

    def forget_requests_up_to(self, seqno: int) -> None:
        if self.requested:
            self.requested = {s: v for s, v in self.requested.items() if s > seqno}

    def to_ask(self, now_s: float, missing: list[int], interval_s: float, max_backoff_s: float) -> list[int]:
        """Which of `missing` to ask for now: never asked, or asked long enough ago (interval x 2^times,
        at most `max_backoff_s`): 2, 4, 8, ... intervals; the chosen ones are noted as asked now."""
        out = []
        requested = self.requested
        for seqno in missing:
            asked = requested.get(seqno)
            if asked is not None and now_s - asked[0] < min(interval_s * (1 << min(asked[1], 8)), max_backoff_s):
                continue
            requested[seqno] = (now_s, 1 if asked is None else asked[1] + 1)
            out.append(seqno)
        return out

    def to_state(self) -> dict[str, Any]:
        w = self.window
        return {"low": w.low, "highest_delivered": w.low, "highest_received": w.high, "buffered": w.buffered,
                "missing": max(0, w.high - w.low - w.buffered), "retained": not self.active,
                "counters": dict(self.counters)}
