"""Broadcast-link start synchronisation (TIPC c64f7a6a): where a receiver's window for a sender starts, and
when a sender starts counting a receiver's acks.

`tipc` (the fix): the sender adds a peer to its receivers (ack table) exactly when its view adds the peer and at
that moment sends it `BcastState(next_seqno, low_seqno)` (unicast, repeated until the peer acks): the peer's
ack entry starts at low_seqno - 1, so nothing from there on is released before the peer has it. The receiver
accepts no multicast of that sender before the BcastState: it drops them (and asks with `BcastStateReq` when
the sender is a member), then starts its window at low_seqno - 1. For a new peer low_seqno = next_seqno.

`legacy` (the race): when its view adds a peer the sender sends an activation hello (a `BcastState` without the
capability bit, carrying the next seqno of that moment, repeated unchanged) but counts the peer's acks only
from the peer's first ACK on (TIPC's NAME_DISTR). A receiver starts its window from its own guess: at the
hello's seqno when the hello came first, at 0 when the sender's ACK came first. Multicasts before that are
dropped. So a delayed hello makes the receiver ask for a message the sender already released (steps 1-9 of the
seed), and a window guessed at 0 asks for everything the sender released before (steps 10-12).

Compatibility: every ACK and BcastState carries the capability bit (`node.wire.SYNC_CAPABLE`). A tipc node
that sees a peer without it treats that peer the legacy way in both directions.
"""
from __future__ import annotations

from dataclasses import dataclass

from node.wire import SYNC_CAPABLE, BcastState


@dataclass
class Outgoing:
    """A BcastState this sender keeps sending to a peer until the peer acks (`frozen`: the legacy hello)."""

    msg: BcastState
    sent_s: float
    frozen: bool


class StartSync:
    """The sync policy of one member (`mode` tipc or legacy) and its per-peer progress."""

    def __init__(self, mode: str, interval_s: float) -> None:
        self.mode = mode
        self.flags = SYNC_CAPABLE if mode == "tipc" else 0
        self.interval_s = interval_s
        self.legacy_peers: set[str] = set()
        self.outgoing: dict[str, Outgoing] = {}   # BcastState / hello sent, not yet answered by an ACK
        self.pending: set[str] = set()            # legacy: view members whose acks do not count yet
        self._asked_s: dict[str, float] = {}      # receiver: last BcastStateReq per sender

    def legacy_with(self, peer: str) -> bool:
        """Whether this member treats `peer` the legacy way."""
        return self.mode == "legacy" or peer in self.legacy_peers

    def note_flags(self, peer: str, flags: int) -> None:
        if flags & SYNC_CAPABLE:
            self.legacy_peers.discard(peer)
        else:
            self.legacy_peers.add(peer)

    # --- sender side ----------------------------------------------------------------------------------------
    def add_receiver(self, now_s: float, peer: str, next_seqno: int, low_seqno: int) -> tuple[bool, BcastState]:
        """The view added `peer`: returns (counts its acks at once, the message to send it)."""
        if self.legacy_with(peer):
            msg = BcastState(next_seqno, next_seqno, self.flags)
            self.outgoing[peer] = Outgoing(msg, now_s, frozen=True)
            self.pending.add(peer)
            return False, msg
        msg = BcastState(next_seqno, low_seqno, self.flags)
        self.outgoing[peer] = Outgoing(msg, now_s, frozen=False)
        return True, msg

    def remove_receiver(self, peer: str) -> None:
        self.outgoing.pop(peer, None)
        self.pending.discard(peer)

    def acked(self, peer: str) -> bool:
        """An ACK came from `peer`: stop resending; returns whether it was a pending legacy receiver (now added)."""
        self.outgoing.pop(peer, None)
        if peer in self.pending:
            self.pending.discard(peer)
            return True
        return False

    def due(self, now_s: float, next_seqno: int, lows: dict[str, int]) -> list[tuple[str, BcastState]]:
        """BcastStates to send again now (tipc ones with current values; legacy hellos unchanged)."""
        out = []
        for peer, item in self.outgoing.items():
            if now_s - item.sent_s < self.interval_s:
                continue
            if not item.frozen:
                item.msg = BcastState(next_seqno, lows.get(peer, item.msg.low_seqno), self.flags)
            item.sent_s = now_s
            out.append((peer, item.msg))
        return out

    # --- receiver side --------------------------------------------------------------------------------------
    def start_low(self, peer: str, msg: BcastState) -> int:
        """Where a new window for `peer` starts (its low = highest delivered) on this BcastState."""
        if self.legacy_with(peer) or not msg.flags & SYNC_CAPABLE:
            return msg.next_seqno - 1  # the activation value, stale if the hello was delayed
        return msg.low_seqno - 1

    def guess_on_ack(self, peer: str) -> int | None:
        """A window for `peer` to open on its ACK without a BcastState first: legacy guesses 0; tipc waits."""
        return 0 if self.legacy_with(peer) else None

    def may_ask(self, now_s: float, peer: str) -> bool:
        """Whether to send `peer` a BcastStateReq now (tipc only, rate-limited)."""
        if self.legacy_with(peer):
            return False
        last = self._asked_s.get(peer)
        if last is not None and now_s - last < self.interval_s:
            return False
        self._asked_s[peer] = now_s
        return True
