"""Per-sender receive records of NAKACK4: the ring window plus what the retransmit task needs to know.

An entry is *active* while its sender is in the view; when the sender leaves, the entry is *retained* (kept,
still receiving and delivering what arrives, but asking for nothing) until the sender returns or
`retain_departed_ms` passes. Under the tipc sync a retained entry also *needs a state*: when the view brings its
sender back before a fresh `BcastState` of that sender arrived, the entry is *awaiting* it (TIPC: "accept
nothing before the BcastState"): it takes no message, asks for nothing and acks nothing until the state comes.
`synced_gen` is the generation (sync.py) of the last state applied, so a duplicate of it is told from a new one.

`delivered_high` is the highest seqno of the sender really delivered to the application; `window.low` is that or
higher, because a BcastState may skip the window up (or open it) past seqnos never delivered. Every seqno in
(delivered_high, window.low] was given up on a state's word. When the sender's own traffic names one of them
(an original multicast, or its HIGHEST) the skip is `contradicted` until the next state of that sender, which
may then move the window back down, never below `delivered_high` (nakack4.py, "Skips the sender contradicts").

Retransmission (JGroups' NAKACK xmit task): a run asks only for seqnos that were already missing at the previous
run (`prev_highest_missing`: the highest missing seqno then), so a gap that is mere reordering is not asked for.
`requested` remembers seqnos asked for (when, how often) until their original arrives (which makes the request
a spurious one) or they fall a capacity behind the window; a seqno is asked for again only after a backoff
(`to_ask`), so answers still in flight are not asked for twice.
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
    needs_state: bool = False              # tipc: retained since the last state; a return waits for a new one
    awaiting_state: bool = False           # tipc: back in the view, accepting nothing until its BcastState
    synced_gen: int = 0                    # generation of the last BcastState applied (0: none or untracked)
    delivered_high: int = 0                # highest seqno delivered to the application (a skip does not move it)
    contradicted: bool = False             # the sender's own traffic named a seqno skipped but never delivered
    contradicted_s: float = 0.0            # ... at this time (delivery waits for the sender's state until then)
    prev_highest_missing: int | None = None  # highest seqno missing at the previous retransmit run
    delivered_since_ack: int = 0
    ack_pending: bool = False              # the sender evidently lacks our ack (duplicates, HIGHEST at or below low)
    requested: dict[int, tuple[float, int]] = field(default_factory=dict)  # seqno -> (last asked at, times)
    counters: Counter = field(default_factory=Counter)

    @property
    def active(self) -> bool:
        return self.retained_since_s is None

    @property
    def accepting(self) -> bool:
        """Whether messages of the sender are taken (every entry but one awaiting its sender's state)."""
        return not self.awaiting_state

    def persistent_gaps(self, missing: list[int]) -> list[int]:
        """Of `missing` (this run's missing seqnos, lowest first), those already missing at the previous run;
        remembers this run's highest missing seqno for the next one."""
        prev = self.prev_highest_missing
        if not missing:
            self.prev_highest_missing = None
            return []
        highest = missing[-1]
        if prev is None or highest > prev:
            self.prev_highest_missing = highest
        if prev is None:
            return []
        return missing if highest <= prev else [s for s in missing if s <= prev]

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
        return {"low": w.low, "highest_delivered": self.delivered_high, "highest_received": w.high,
                "buffered": w.buffered, "missing": max(0, w.high - w.low - w.buffered), "retained": not self.active,
                "awaiting_state": self.awaiting_state, "synced_gen": self.synced_gen,
                "skip_contradicted": self.contradicted,
                "counters": dict(self.counters)}
