"""Per-peer connection records: a `SendEntry` (messages to the peer) and a `ReceiveEntry` (messages from it).

Each entry carries its connection id, its state (`open` or `closing`; a closed entry is removed from the
table), the window, the bookkeeping of the retransmit task, and counters; `to_state()` renders it for the
control API. Which fields a variant uses is up to the variant (unicast1 leaves the conn_ids at 0).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from node.unicast.connid import conn_older
from node.unicast.window import ReceiveWindow, SendWindow

OPEN = "open"
CLOSING = "closing"
MAX_LINEAGE = 16


@dataclass
class SendEntry:
    """The send side of a connection to one peer."""

    conn_id: int
    created_s: float
    window: SendWindow
    state: str = OPEN
    closing_since_s: float | None = None
    first_seqno: int = 1            # the seqno sent with first=True ...
    first_conn_id: int = 0          # ... as long as the connection still has this id (set at creation)
    conn_ids: list[int] = field(default_factory=list)  # every id this connection had (unicast3 syncs add ids)
    last_ack_s: float = 0.0         # last progress: accepted ACK/STABLE, or a send into an empty window
    prev_tail: tuple[int, int] | None = None  # (low, highest_sent) at the previous retransmit run
    syncing: bool = False           # unicast3: SYNC-OK sent, SYNC-ACK not yet received
    sync_started_s: float | None = None  # unicast3: when the last sync started (None: never)
    sync_ok_sent_s: float = 0.0     # unicast3: when the last SYNC-OK left
    sync_deferred: bool = False     # unicast3: a SYNC came too soon after the last sync; the retransmit task starts it
    ahead_told_s: float | None = None  # unicast3: last CLOSE sent because the receiver acked above what we sent
    blocked_since_s: float | None = None  # the window is full since (sends wait), None: not blocked
    xmit_served_s: dict[int, float] = field(default_factory=dict)  # unicast3: seqno -> when an XMIT_REQ resent it
    active_s: float = 0.0           # last use: a send or an accepted ack (unicast3's conn_expiry_timeout)
    counters: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if not self.conn_ids:
            self.conn_ids.append(self.conn_id)
        if not self.first_conn_id:
            self.first_conn_id = self.conn_id
        self.last_ack_s = self.created_s
        self.active_s = self.created_s

    def new_conn_id(self, conn_id: int) -> None:
        """Switch the connection to `conn_id` (a sync), remembering the earlier ids."""
        self.conn_id = conn_id
        self.conn_ids.append(conn_id)
        del self.conn_ids[:-MAX_LINEAGE]

    def is_first(self, seqno: int) -> bool:
        return seqno == self.first_seqno and self.conn_id == self.first_conn_id

    def to_state(self) -> dict[str, Any]:
        w = self.window
        return {"conn_id": self.conn_id, "state": self.state, "low": w.low, "highest_sent": w.highest_sent,
                "highest_acked": w.low, "unacked": len(w), "capacity": w.capacity, "syncing": self.syncing,
                "blocked": self.blocked_since_s is not None,
                "counters": dict(self.counters)}


@dataclass
class ReceiveEntry:
    """The receive side of a connection from one peer."""

    conn_id: int
    window: ReceiveWindow
    state: str = OPEN
    closing_since_s: float | None = None
    lineage: list[int] = field(default_factory=list)  # ids of the sender's stream this window follows
    data_conn_id: int = 0           # unicast3: the id of the last message the window took since it adopted one
    opened_by: int | None = None    # unicast3: seqno of the first=true message that opened it (None: a sync did)
    stuck_since_s: float | None = None  # unicast3: a gap has held delivery at `stuck_at` since (None: no gap)
    stuck_at: int = 0
    delivered_since_ack: int = 0
    ack_pending: bool = False       # an ACK/STABLE is owed (deliveries, or a duplicate the sender should stop)
    ack_timestamp: int = 0
    last_stable_seqno: int = 0      # unicast2: seqno of the last STABLE sent
    prev_highest_missing: int | None = None  # highest gap seen by the previous retransmit run
    active_s: float = 0.0           # last use: a message of this connection accepted (conn_expiry_timeout)
    counters: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if not self.lineage:
            self.lineage.append(self.conn_id)

    def follows(self, conn_id: int) -> bool:
        """Whether `conn_id` is this window's connection or an earlier id of the same stream."""
        return conn_id in self.lineage

    def took(self, conn_id: int) -> None:
        """The window took a message that carried `conn_id` (one of its lineage)."""
        self.data_conn_id = conn_id

    @property
    def ack_conn_id(self) -> int:
        """The id our acks carry: the window's, or a newer one the last message we took came with. The sender
        takes acks of its current id only, and a window may follow its stream under an id it learned out of order
        (an older SYNC-OK it asked for, a window brought back): acking under the window's id would have every ack
        discarded, the sender's messages never released."""
        data = self.data_conn_id
        return data if data and conn_older(self.conn_id, data) else self.conn_id

    def adopt(self, conn_id: int) -> None:
        """The sender's stream continues under `conn_id` (a unicast3 sync that keeps the window)."""
        self.conn_id = conn_id
        self.data_conn_id = 0
        self.lineage.append(conn_id)
        del self.lineage[:-MAX_LINEAGE]

    def to_state(self) -> dict[str, Any]:
        w = self.window
        missing = w.highest_received - w.highest_delivered - len(w.buffered)
        return {"conn_id": self.conn_id, "state": self.state, "low": w.highest_delivered,
                "highest_delivered": w.highest_delivered, "highest_received": w.highest_received,
                "buffered": len(w.buffered), "missing": max(0, missing),
                "counters": dict(self.counters)}
