"""Broadcast-link start synchronisation (TIPC c64f7a6a): where a receiver's window for a sender starts, and
when a sender starts counting a receiver's acks.

`tipc` (the fix): the sender adds a peer to its receivers (ack table) exactly when its view adds the peer and at
that moment sends it `BcastState(next_seqno, low_seqno)` (unicast): the peer's ack entry starts at
low_seqno - 1, so nothing from there on is released before the peer has it. The receiver accepts no multicast
of that sender before the BcastState: it drops them (and asks with `BcastStateReq` when the sender is a member),
then starts its window at low_seqno - 1. For a new peer low_seqno = next_seqno.

Each such synchronisation is an *episode* with a generation `gen` (1..GEN_MAX, per peer, the next one for
every new episode): the BcastState carries it in its flag bits 1-6, and the receiver answers every BcastState
with an ACK that echoes it in the same bits (a plain ACK has 0 there). Bit 7 of a BcastState (`AHEAD`) says
the episode was started because the receiver acked a seqno above anything this sender sent: its window is ahead
of the sender's stream (forged messages delivered in the sender's name), and the state is the sender's word on
where its stream really is (nakack4.py, "Windows ahead of their sender"). The sender resends the BcastState (with
current values, same gen) every `sync_interval` until the ACK echoing that gen arrives; an ACK of an older
episode, a plain ACK, or one sent before the state was seen does not stop it. A `BcastStateReq` from a receiver
starts a new episode when none is under way (a receiver that lost track of us, or a returning one whose view
brought us back while ours never dropped it). Duplicated and stale BcastStates are harmless: a receiver acks
them again, applies a generation it already applied only as a no-op, and a skip only ever moves a window up,
unless the sender's own multicasts contradicted the skip (then its next state may move the window back down,
never below what was delivered: nakack4.py).

`legacy` (the race): when its view adds a peer the sender sends an activation hello (a `BcastState` without the
capability bit, carrying the next seqno of that moment, repeated unchanged) but counts the peer's acks only
from the peer's first ACK on (TIPC's NAME_DISTR), and any ACK of the peer stops the hello. A receiver starts its
window from its own guess: at the hello's seqno when the hello came first, at 0 when the sender's ACK came
first. Multicasts before that are dropped. So a delayed hello makes the receiver ask for a message the sender
already released (steps 1-9 of the seed), and a window guessed at 0 asks for everything the sender released
before (steps 10-12).

Compatibility: every ACK and BcastState carries the capability bit (`node.wire.SYNC_CAPABLE`). A tipc node
that sees a peer without it treats that peer the legacy way in both directions. The wire format is unchanged:
the generation lives in flag bits that legacy nodes ignore.

State is kept only for peers the caller names (members of the view, receivers): nothing here grows for a
stranger's datagram.
"""
from __future__ import annotations

from dataclasses import dataclass

from node.wire import SYNC_CAPABLE, BcastState

GEN_SHIFT = 1
GEN_MAX = 0x3F  # generations 1..63 in flag bits 1-6 (0: no generation: a plain ACK, an untracked state)
AHEAD = 0x80    # BcastState flag bit 7: the receiver acked above what this sender sent


def gen_of(flags: int) -> int:
    """The sync generation carried by the flags of a BcastState or an ACK (0: none)."""
    return (flags >> GEN_SHIFT) & GEN_MAX


@dataclass
class Outgoing:
    """A BcastState this sender keeps sending to a peer until the peer acks it (`frozen`: the legacy hello,
    stopped by any ACK)."""

    msg: BcastState
    sent_s: float
    frozen: bool
    gen: int = 0
    ahead: bool = False  # started (or marked) because the receiver acked above what we sent


class StartSync:
    """The sync policy of one member (`mode` tipc or legacy) and its per-peer progress."""

    def __init__(self, mode: str, interval_s: float) -> None:
        self.mode = mode
        self.flags = SYNC_CAPABLE if mode == "tipc" else 0
        self.interval_s = interval_s
        self.legacy_peers: set[str] = set()
        self.outgoing: dict[str, Outgoing] = {}   # BcastState / hello sent, not yet answered by its ACK
        self.pending: set[str] = set()            # legacy: view members whose acks do not count yet
        self._gen: dict[str, int] = {}            # sender: the generation of the last episode per peer
        self._asked_s: dict[str, float] = {}      # receiver: last BcastStateReq per sender

    def legacy_with(self, peer: str) -> bool:
        """Whether this member treats `peer` the legacy way."""
        return self.mode == "legacy" or peer in self.legacy_peers

    def note_flags(self, peer: str, flags: int) -> None:
        """`peer` (a member: the caller checks) sent these flags: does it speak the tipc sync?"""
        if flags & SYNC_CAPABLE:
            self.legacy_peers.discard(peer)
        else:
            self.legacy_peers.add(peer)

    def ack_flags(self, gen: int = 0) -> int:
        """The flags of an ACK, answering the BcastState of generation `gen` (0: a plain ACK)."""
        return self.flags | ((gen & GEN_MAX) << GEN_SHIFT) if self.flags else 0

    # --- sender side ----------------------------------------------------------------------------------------
    def _next_gen(self, peer: str) -> int:
        gen = self._gen.get(peer, 0) % GEN_MAX + 1
        self._gen[peer] = gen
        return gen

    def _state(self, next_seqno: int, low_seqno: int, gen: int, ahead: bool = False) -> BcastState:
        return BcastState(next_seqno, low_seqno, self.flags | (gen << GEN_SHIFT) | (AHEAD if ahead else 0))

    def add_receiver(self, now_s: float, peer: str, next_seqno: int, low_seqno: int) -> tuple[bool, BcastState]:
        """The view added `peer`: returns (counts its acks at once, the message to send it)."""
        if self.legacy_with(peer):
            msg = BcastState(next_seqno, next_seqno, self.flags)
            self.outgoing[peer] = Outgoing(msg, now_s, frozen=True)
            self.pending.add(peer)
            return False, msg
        gen = self._next_gen(peer)
        msg = self._state(next_seqno, low_seqno, gen)
        self.outgoing[peer] = Outgoing(msg, now_s, frozen=False, gen=gen)
        return True, msg

    def resync(self, now_s: float, peer: str, next_seqno: int, low_seqno: int, ahead: bool = False) -> BcastState:
        """A tipc receiver needs our state again (it asked, asked for seqnos we no longer hold, or acked above
        what we sent: `ahead`, kept until the episode ends): the state of the episode under way, or of a new one."""
        item = self.outgoing.get(peer)
        if item is not None and not item.frozen:
            item.ahead = item.ahead or ahead
            item.msg = self._state(next_seqno, low_seqno, item.gen, item.ahead)
            item.sent_s = now_s
            return item.msg
        gen = self._next_gen(peer)
        msg = self._state(next_seqno, low_seqno, gen, ahead)
        self.outgoing[peer] = Outgoing(msg, now_s, frozen=False, gen=gen, ahead=ahead)
        return msg

    def mark_ahead(self, peer: str) -> None:
        """The tipc episode under way with `peer` carries AHEAD from its next resend on."""
        item = self.outgoing.get(peer)
        if item is not None and not item.frozen:
            item.ahead = True

    def remove_receiver(self, peer: str) -> None:
        self.outgoing.pop(peer, None)
        self.pending.discard(peer)

    def acked(self, peer: str, flags: int) -> tuple[bool, bool]:
        """An ACK with `flags` came from `peer`. Returns (it ends the episode under way, it was a pending legacy
        receiver: now added). The legacy way any ACK ends it; the tipc way only the ACK echoing its gen."""
        item = self.outgoing.get(peer)
        ends = item is not None and (item.frozen or self.legacy_with(peer) or gen_of(flags) == item.gen)
        if ends:
            del self.outgoing[peer]
        if peer in self.pending:
            self.pending.discard(peer)
            return ends, True
        return ends, False

    def due(self, now_s: float, next_seqno: int, lows: dict[str, int]) -> list[tuple[str, BcastState]]:
        """BcastStates to send again now (tipc ones with current values and their gen; legacy hellos
        unchanged)."""
        out = []
        for peer, item in self.outgoing.items():
            if now_s - item.sent_s < self.interval_s:
                continue
            if not item.frozen:
                item.msg = self._state(next_seqno, lows.get(peer, item.msg.low_seqno), item.gen, item.ahead)
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
