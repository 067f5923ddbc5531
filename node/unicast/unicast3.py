"""UNICAST3, the fixed protocol: conn_ids on every message, CLOSING connections, and the SYNC handshake.

Per peer there is a send entry and a receive entry, each with a connection id (conn_id).
- Sender: every DATA carries the conn_id; the first message of a connection carries first=true. Acks are
  cumulative (the receiver's highest delivered seqno) and accepted only with the current conn_id and not
  during a sync. The retransmit task (every xmit_interval) resends the highest unacked message when neither
  the acked nor the sent seqno moved since the previous run (a lost last message or lost acks).
- Receiver: DATA of its connection (or an earlier id of the same stream after a sync) goes into the window;
  an ACK leaves after ack_threshold deliveries, otherwise with the next retransmit run, which also asks
  (XMIT_REQ) for the gaps that were already there at the previous run. DATA with first=true and a newer
  unknown conn_id starts a new window at its seqno (the window it replaces is kept, in case that message was
  forged); so does a first=true message of the window's connection naming an earlier start than the one that
  opened it, or coming under the id a SYNC-OK gave the window at a seqno the window holds for delivered (a sender
  never sends `first` under an id it announced in a SYNC-OK). Any other conn_id mismatch (older: a delayed copy,
  or the real stream after a forged `first` took the window; newer without first; no window) is dropped and
  answered by a SYNC, at most one per sync_min_interval, repeated until sync_timeout (DESIGN.md,
  "Self-stabilisation"); so is a gap that has held delivery for a sync timeout although asked for every run (the
  sender released what we lack).
- A receiver acks under the id of the last message it took when that is newer than its window's (a window
  may follow the sender's stream under an id it learned out of order), and a SYNC-OK it asked for (a SYNC went out
  since it wanted the sync; one held back by sync_min_interval asked nothing yet) is applied even when it names
  an older id than the window's (that id came from a forged `first` or SYNC-OK of a later generation); only an
  unsolicited one that is older waits for the current answer (`old_sync_ok`).
- An ACK of our current connection above anything we sent says the receiver's window is ahead of our stream
  (forged messages delivered in our name): all we sent counts as acked, and we answer with CLOSE (at most one per
  sync_min_interval), so our next message finds no window, SYNCs, and the window starts again at our low
  (DESIGN.md, "Self-stabilisation").
- SYNC handshake (seed unicast3-receiver-sync-JGRP-1875): on SYNC the sender switches to a new conn_id, starts
  discarding ACKs from that receiver and answers SYNC-OK(low, conn_id), low being its highest acked seqno.
  The receiver sets its window to (low, conn_id) whatever the window held (a SYNC-OK it asked for is the
  sender's word: a window replaced by a forged `first` comes back if it follows that stream) and answers
  SYNC-ACK, after which the sender trusts acks again. A delayed ACK of the old connection is discarded because
  its conn_id no longer matches (JGRP-1873).
  SYNC and SYNC-OK are repeated by the retransmit task until answered or sync_timeout passes. A sender answers
  SYNCs at the rate a real receiver asks (anyone can send one in its name): a new sync at most once per
  sync_min_interval (one asked sooner starts when the interval is over), during a sync at most one SYNC-OK per
  xmit_interval; a receiver answers a repeated SYNC-OK (one it already applied) at most once per xmit_interval; a
  sender resends a seqno in answer to an XMIT_REQ at most once per xmit_interval.
  The new conn_id is the next generation of the same stream (node.unicast.connid): a window following that
  stream (an admin `sync`, or a SYNC whose trigger was overtaken by the first message) keeps what it delivered
  and only skips what the sender no longer has; a missing window or one of another stream starts again at low.
- Views: a view without the peer marks both entries CLOSING; traffic or the peer's return reopens them; an entry
  CLOSING for conn_close_timeout is removed (the sender tells a peer that is still a member with CLOSE). With
  conn_expiry_timeout (0: off) an OPEN connection unused that long becomes CLOSING too (JGroups' reaper).
- Lives: a peer's new incarnation (node.incarnation) removes both entries of its old life at once.
  A send connection to a non-member whose unacked messages made no progress (no ack) for max_retransmit_time
  is removed.
- Requests: send, close (mark both entries CLOSING, as JGroups' closeConnection), remove (both entries at
  once, unilaterally: the seeds' scenarios), remove_receive, sync {peer} (admin).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from mypy_extensions import mypyc_attr

from node.core import Deliver, Effect, Emit, Send
from node.unicast.base import UnicastBase
from node.unicast.config import UnicastConfig
from node.unicast.connid import conn_older, next_generation, same_stream
from node.unicast.entries import CLOSING, OPEN, ReceiveEntry, SendEntry
from node.unicast.window import NEW, OUTSIDE_WINDOW
from node.wire import (Message, UnicastAck, UnicastClose, UnicastData, UnicastSync, UnicastSyncAck, UnicastSyncOk,
                       UnicastXmitReq, encode_message)


@dataclass
class _RxSync:
    """A SYNC this member sent as receiver and for which no SYNC-OK came yet."""

    started_s: float


def _restarts(entry: ReceiveEntry, msg: UnicastData) -> bool:
    """Whether a first=true message of the window's stream starts the window again: it names an earlier start than
    the first message that opened the window (that one was not the sender's), or it comes under the id a SYNC-OK
    gave the window at a seqno the window holds for delivered -- a sender never sends `first` under an id it
    announced in a SYNC-OK, so one of the two was not the sender's, and dropping the message as a duplicate would
    lose it for good (a forged SYNC-OK answering a SYNC a forged message provoked, naming the sender's coming
    connection id)."""
    if entry.opened_by is not None:
        return msg.seqno < entry.opened_by
    # no first message opened the window: a SYNC-OK set it, and its id is the SYNC-OK's (`_keep_window`)
    return msg.conn_id == entry.conn_id and msg.seqno <= entry.window.highest_delivered


@mypyc_attr(allow_interpreted_subclasses=True)  # extension layers subclass it (node/unicast/noretx.py)
class Unicast3(UnicastBase):
    """UNICAST3 with the seed's SYNC / SYNC-OK / SYNC-ACK handshake (see the module docstring)."""

    NAME = "unicast3"
    ADMIN_SYNC = True

    def __init__(self, local: str, config: UnicastConfig, members: Iterable[str] | None = None) -> None:
        super().__init__(local, config, members)
        self._rx_sync: dict[str, _RxSync] = {}
        self._replaced: dict[str, ReceiveEntry] = {}  # per sender, the window its last `first` message replaced
        self._last_sync_tx_s: dict[str, float] = {}
        self._last_repeat_ack: dict[str, tuple[int, float]] = {}  # per sender: the SYNC-ACK last sent for a repeat
        self._close_s = config.conn_close_timeout_ms / 1000
        self._sync_min_s = config.sync_min_interval_ms / 1000
        self._sync_timeout_s = config.sync_timeout_ms / 1000
        self._max_retransmit_s = config.max_retransmit_time_ms / 1000
        self._expiry_s = config.conn_expiry_timeout_ms / 1000

    def _make_data(self, entry: SendEntry, seqno: int, payload: bytes, first: bool | None) -> UnicastData:
        return UnicastData(seqno, entry.conn_id, entry.is_first(seqno) if first is None else first, payload)

    def _resync(self, direction: str, peer: str, kind: str, msg: Message, **extra: Any) -> Emit:
        fields = {"proto": self.NAME, "peer": peer, "kind": kind, "bytes": len(encode_message(msg))}
        fields.update(extra)
        return Emit(f"resync_{direction}", fields)

    def on_peer_restarted(self, now_s: float, peer: str) -> list[Effect]:
        """`peer` restarted (its datagrams carry a new incarnation). In JGroups a restarted member has a new
        address, so its peers start fresh tables for it; here a life keeps its name, so both entries of the old
        life go now, before the new life's first message: its seqnos start again at 1 under a conn_id that may
        equal or compare older than the old one (the id space says nothing across lives), and its first message
        starts a new window. What was unacked to the old life is lost with it (`unacked` in the event)."""
        out: list[Effect] = []
        self._rx_sync.pop(peer, None)
        self._last_sync_tx_s.pop(peer, None)
        self._last_repeat_ack.pop(peer, None)
        self._replaced.pop(peer, None)
        tables: tuple[tuple[str, dict[str, SendEntry] | dict[str, ReceiveEntry]], ...] = (
            ("send", self.send_entries), ("recv", self.recv_entries))
        for direction, table in tables:
            entry = table.pop(peer, None)
            if entry is not None:
                self.counters["entries_of_old_lives"] += 1
                extra = {"unacked": len(entry.window.msgs)} if isinstance(entry, SendEntry) else {}
                out.append(self._conn_state(peer, direction, "removed", entry.conn_id, reason="peer_restarted",
                                            **extra))
        return out

    # --- receiver side --------------------------------------------------------------------------------------
    def _on_data(self, now_s: float, src: str, msg: UnicastData) -> list[Effect]:
        out: list[Effect] = []
        entry = self.recv_entries.get(src)
        if entry is not None and entry.follows(msg.conn_id) and not (msg.first and _restarts(entry, msg)):
            self._accept(now_s, src, entry, msg, out)
            return out
        # a first message of a newer connection, or of this one contradicting what set the window up (`_restarts`):
        # a new window from here
        if msg.first and (entry is None or not conn_older(msg.conn_id, entry.conn_id)):
            if entry is not None:
                self._replaced[src] = entry  # in case the first message was forged (see _on_sync_ok)
            entry = self._new_recv_entry(now_s, src, msg.conn_id, msg.seqno - 1, out)
            entry.opened_by = msg.seqno
            self._accept(now_s, src, entry, msg, out)
            return out
        # the sender's stream and this window disagree: a delayed message of an earlier connection, a new stream
        # whose first message is not here yet, a sync not seen yet -- or a window a forged message set up. The
        # sender is the authority over its stream: drop, and ask it (SYNC, at most one per sync_min_interval)
        action = "no_conn" if entry is None else "wrong_conn"
        if entry is not None and conn_older(msg.conn_id, entry.conn_id):
            entry.counters["old_conn"] += 1
        self.counters[action] += 1
        out.append(self._data_rx(src, msg, action))
        self._ask_sync(now_s, src, out)
        return out

    def _ask_sync(self, now_s: float, src: str, out: list[Effect]) -> None:
        """Start a sync with `src`'s stream (a SYNC now, unless one left less than sync_min_interval ago)."""
        if src not in self._rx_sync:
            self._rx_sync[src] = _RxSync(now_s)
        last = self._last_sync_tx_s.get(src)
        if last is not None and now_s - last < self._sync_min_s:
            self.counters["sync_suppressed"] += 1
            return
        self._send_sync(now_s, src, out)

    def _accept(self, now_s: float, src: str, entry: ReceiveEntry, msg: UnicastData, out: list[Effect]) -> None:
        entry.active_s = now_s
        entry.took(msg.conn_id)
        if entry.state == CLOSING:
            self._reopen_recv(src, entry, out)
        result, delivered = self._deliver_new(src, entry, msg, out)
        if result != NEW:
            if result != OUTSIDE_WINDOW:
                entry.ack_pending = True  # the sender resent something delivered: tell it again
            return
        if delivered:
            entry.delivered_since_ack += delivered
            if entry.delivered_since_ack >= self.config.ack_threshold:
                self._send_ack(src, entry, out)

    def _send_ack(self, peer: str, entry: ReceiveEntry, out: list[Effect]) -> None:
        entry.ack_timestamp = (entry.ack_timestamp + 1) & 0xFFFFFFFF
        entry.delivered_since_ack = 0
        entry.ack_pending = False
        seqno = entry.window.highest_delivered
        conn_id = entry.ack_conn_id
        out.append(Send(peer, UnicastAck(seqno, conn_id, entry.ack_timestamp)))
        out.append(Emit("ack_tx", {"proto": self.NAME, "to": peer, "seqno": seqno, "conn_id": conn_id}))

    def _send_sync(self, now_s: float, peer: str, out: list[Effect]) -> None:
        self._last_sync_tx_s[peer] = now_s
        msg = UnicastSync()
        out.append(Send(peer, msg))
        out.append(self._resync("tx", peer, "sync", msg))

    def _on_sync_ok(self, now_s: float, src: str, msg: UnicastSyncOk) -> list[Effect]:
        """SYNC-OK answers our SYNC: the sender's own word on its stream (conn_id) and on what it no longer has
        (low), so it sets the window whatever the window held -- a window a forged message set up included. One
        that answers no SYNC of ours is taken only when it cannot cost a message: a repeat of a sync already
        applied, or a newer generation of the window's own stream that skips nothing (a stale SYNC of ours,
        delayed, made the sender sync again). Any other is dropped (`unsolicited_sync_ok`): a forged or stray
        SYNC-OK can neither replace a window nor skip what it has not delivered. A sync wanted whose SYNC is held
        back by sync_min_interval has asked nothing yet: a SYNC-OK then answers no SYNC of ours (the fuzz cluster
        test saw a forged one skip a window 50,000 seqnos past its sender in that gap)."""
        entry = self.recv_entries.get(src)
        pending = self._rx_sync.get(src)
        # asked for: a SYNC went out since the sync was wanted (one held back by sync_min_interval asked nothing yet)
        solicited = pending is not None and self._last_sync_tx_s.get(src, float("-inf")) >= pending.started_s
        repeated = entry is not None and entry.follows(msg.conn_id)
        harmless = (entry is not None and same_stream(msg.conn_id, entry.conn_id)
                    and msg.low <= entry.window.highest_delivered)
        if not (solicited or repeated or harmless):
            self.counters["unsolicited_sync_ok"] += 1
            return [self._resync("rx", src, "sync_ok", msg, conn_id=msg.conn_id, low=msg.low, action="discarded")]
        out: list[Effect] = [self._resync("rx", src, "sync_ok", msg, conn_id=msg.conn_id, low=msg.low)]
        replaced = self._replaced.get(src)
        if entry is not None and not same_stream(msg.conn_id, entry.conn_id) and replaced is not None \
                and same_stream(msg.conn_id, replaced.conn_id):
            # the window a `first` message had replaced follows the sender's stream: that message was not the
            # sender's (forged, or of a stream it left): the replaced window comes back, with what it delivered
            entry = self.recv_entries[src] = replaced
            del self._replaced[src]
            repeated = entry.follows(msg.conn_id)
            self.counters["windows_restored"] += 1
            out.append(self._conn_state(src, "recv", "restored", entry.conn_id))
        if not solicited and entry is not None and same_stream(msg.conn_id, entry.conn_id) \
                and conn_older(msg.conn_id, entry.conn_id):
            entry.counters["old_sync_ok"] += 1  # an earlier sync's answer, overtaken: wait for the current one
            return out
        # (one we asked for is the sender's word even when it names an older id than the window's: that id came
        # from a message that was not the sender's answer -- a forged `first` or SYNC-OK of a later generation)
        self._rx_sync.pop(src, None)
        self._replaced.pop(src, None)
        if (solicited and entry is not None and same_stream(msg.conn_id, entry.conn_id)
                and entry.opened_by is not None and msg.low < entry.opened_by - 1):
            # the sender still has messages from before the first message that opened the window (it was not the
            # sender's): the window starts again where the sender says (only when asked: an unsolicited SYNC-OK
            # must not make a window deliver again)
            self._new_recv_entry(now_s, src, msg.conn_id, msg.low, out)
            self.counters["windows_restarted"] += 1
        elif repeated:  # a repeated SYNC-OK: our SYNC-ACK was lost, send it again -- once per xmit_interval, as the
            # sender repeats it (anyone can repeat a SYNC-OK in the sender's name, and the SYNC-ACK goes to the sender)
            last = self._last_repeat_ack.get(src)
            if last is not None and last[0] == msg.conn_id and now_s - last[1] < self.xmit_s:
                self.counters["sync_acks_suppressed"] += 1
                return out
            self._last_repeat_ack[src] = (msg.conn_id, now_s)
        elif entry is not None and same_stream(msg.conn_id, entry.conn_id):  # the window's own stream
            self._keep_window(src, entry, msg, out)
        else:
            self._new_recv_entry(now_s, src, msg.conn_id, msg.low, out)
        ack = UnicastSyncAck(msg.conn_id)
        out.append(Send(src, ack))
        out.append(self._resync("tx", src, "sync_ack", ack, conn_id=msg.conn_id))
        return out

    def _keep_window(self, src: str, entry: ReceiveEntry, msg: UnicastSyncOk, out: list[Effect]) -> None:
        """The window follows the sender's stream: adopt the new conn_id, skip what the sender no longer has."""
        entry.adopt(msg.conn_id)
        entry.opened_by = None  # where the stream starts is the sender's word now
        if entry.state == CLOSING:
            entry.state = OPEN
            entry.closing_since_s = None
        out.append(self._conn_state(src, "recv", OPEN, msg.conn_id))
        w = entry.window
        if msg.low > w.highest_delivered:
            held = sorted(s for s in w.buffered if s <= msg.low)
            entry.counters["skipped"] += msg.low - w.highest_delivered - len(held)
            for seqno in held:  # in order, across the gaps the sender can no longer fill
                out.append(Deliver(src, w.buffered[seqno]))
            entry.counters["delivered"] += len(held)
            w.rebase(msg.low)
            ready = w.drain()
            for _seqno, payload in ready:
                out.append(Deliver(src, payload))
            entry.counters["delivered"] += len(ready)
            entry.delivered_since_ack += len(held) + len(ready)
            entry.ack_pending = True
        entry.prev_highest_missing = None

    def _on_close(self, now_s: float, src: str, msg: UnicastClose) -> list[Effect]:
        entry = self.recv_entries.get(src)
        if entry is None or not entry.follows(msg.conn_id):
            self.counters["close_ignored"] += 1
            return []
        self._rx_sync.pop(src, None)
        return self._remove_receive(now_s, src, "closed")

    # --- sender side ----------------------------------------------------------------------------------------
    def _on_ack(self, now_s: float, src: str, msg: UnicastAck) -> list[Effect]:
        entry = self.send_entries.get(src)
        accepted = (entry is not None and not entry.syncing and msg.conn_id == entry.conn_id
                    and msg.seqno <= entry.window.highest_sent)
        if accepted and entry is not None:
            entry.window.purge_to(msg.seqno)
            entry.last_ack_s = now_s
            entry.counters["acks_accepted"] += 1
            entry.active_s = now_s
        else:
            self.counters["acks_discarded"] += 1
            if entry is not None:
                entry.counters["acks_discarded"] += 1
        event = {"proto": self.NAME, "from": src, "seqno": msg.seqno, "conn_id": msg.conn_id,
                 "action": "accepted" if accepted else "discarded"}
        out: list[Effect] = [Emit("ack_rx", event)]
        if entry is not None and not entry.syncing and msg.conn_id == entry.conn_id \
                and msg.seqno > entry.window.highest_sent:
            event["reason"] = "above_sent"
            self._receiver_ahead(now_s, src, entry, out)
        return out

    def _receiver_ahead(self, now_s: float, src: str, entry: SendEntry, out: list[Effect]) -> None:
        """`src` acked a seqno of our current connection above anything we sent: its window is ahead of our
        stream (forged messages delivered in our name), and what we send next would be duplicates there until
        our stream passed it. It holds a message at every seqno we sent, so all of it counts as acked; and we are
        the authority over our stream: CLOSE tells it to drop that window (at most once per sync_min_interval),
        our next message then finds no window there, which SYNCs, and our SYNC-OK starts its window again at our
        low: all we had sent (DESIGN.md, "Self-stabilisation")."""
        entry.counters["acks_above_sent"] += 1
        self.counters["acks_above_sent"] += 1
        if entry.ahead_told_s is not None and now_s - entry.ahead_told_s < self._sync_min_s:
            return
        entry.ahead_told_s = now_s
        entry.window.purge_to(entry.window.highest_sent)
        self.counters["closes_on_ack_above_sent"] += 1
        out.append(Send(src, UnicastClose(entry.conn_id)))

    def _on_xmit_req(self, now_s: float, src: str, msg: UnicastXmitReq) -> list[Effect]:
        out: list[Effect] = []
        entry = self.send_entries.get(src)
        if entry is None:
            # the connection is gone here: serve nothing and tell the receiver to drop its window
            self._serve_xmit(src, None, msg.seqnos, out)
            if msg.conn_id:
                out.append(Send(src, UnicastClose(msg.conn_id)))
            return out
        if msg.conn_id and msg.conn_id not in entry.conn_ids:
            entry.counters["xmit_reqs_discarded"] += 1  # asks for seqnos of another connection
            out.append(Emit("xmit_req_rx", {"proto": self.NAME, "from": src, "seqnos": list(msg.seqnos),
                                            "found": [], "missing": [], "action": "discarded"}))
            return out
        # a receiver asks for a seqno at most once per retransmit run: one resent in answer to a request less than
        # an xmit_interval ago is not resent again (anyone can send an XMIT_REQ in the receiver's name, and the
        # resends go to the receiver: a flood of them would be a flood of resends)
        served = entry.xmit_served_s
        held = entry.window.msgs
        repeats: set[int] = set()
        for seqno in msg.seqnos:
            if now_s - served.get(seqno, -1.0) < self.xmit_s:
                repeats.add(seqno)
            elif seqno in held:
                served[seqno] = now_s
        if repeats:
            entry.counters["xmit_repeats_ignored"] += len(repeats)
        self._serve_xmit(src, entry, msg.seqnos, out, repeats)
        return out

    def _on_sync(self, now_s: float, src: str, msg: UnicastSync) -> list[Effect]:
        """A receiver asks for our stream. Answered at the rate a real receiver asks, whatever arrives (anyone can
        send a SYNC in its name): a new sync (a new generation of the connection id) at most once per
        sync_min_interval -- one asked sooner is started by the retransmit task when the interval is over
        (`syncs_deferred`) -- and, during a sync, at most one SYNC-OK per xmit_interval (`sync_oks_suppressed`; the
        retransmit task repeats it anyway). The SYNC-OK goes to the real member whoever sent the SYNC, so a
        flood of forged SYNCs costs each peer a few datagrams a second, not one per SYNC, and a real receiver's
        sync still starts within one sync_min_interval and one xmit_interval."""
        out: list[Effect] = [self._resync("rx", src, "sync", msg)]
        entry = self.send_entries.get(src)
        if entry is None:
            self.counters["sync_without_conn"] += 1  # our next message to src starts a new connection anyway
            return out
        if entry.state == CLOSING:
            self._reopen_send(src, entry, out)
        if entry.syncing:
            if now_s - entry.sync_ok_sent_s < self.xmit_s:
                entry.counters["sync_oks_suppressed"] += 1
            else:
                self._send_sync_ok(now_s, src, entry, out)
        elif entry.sync_started_s is not None and now_s - entry.sync_started_s < self._sync_min_s:
            entry.sync_deferred = True
            entry.counters["syncs_deferred"] += 1
        else:
            self._start_sync(now_s, src, entry, out)
        return out

    def _start_sync(self, now_s: float, peer: str, entry: SendEntry, out: list[Effect]) -> None:
        """Switch the connection to the next generation of its id, discard acks until the SYNC-ACK, send SYNC-OK."""
        entry.new_conn_id(next_generation(entry.conn_id))
        entry.syncing = True
        entry.sync_deferred = False
        entry.sync_started_s = now_s
        entry.counters["syncs"] += 1
        out.append(self._conn_state(peer, "send", OPEN, entry.conn_id))
        self._send_sync_ok(now_s, peer, entry, out)

    def _send_sync_ok(self, now_s: float, peer: str, entry: SendEntry, out: list[Effect]) -> None:
        entry.sync_ok_sent_s = now_s
        msg = UnicastSyncOk(entry.window.low, entry.conn_id)
        out.append(Send(peer, msg))
        out.append(self._resync("tx", peer, "sync_ok", msg, conn_id=entry.conn_id, low=entry.window.low))

    def _on_sync_ack(self, now_s: float, src: str, msg: UnicastSyncAck) -> list[Effect]:
        out: list[Effect] = [self._resync("rx", src, "sync_ack", msg, conn_id=msg.conn_id)]
        entry = self.send_entries.get(src)
        if entry is not None and entry.syncing and msg.conn_id == entry.conn_id:
            entry.syncing = False
        return out

    # --- requests, views, the retransmit task ---------------------------------------------------------------
    def _request_sync(self, now_s: float, peer: str) -> list[Effect]:
        """Admin: resynchronise the receive window for `peer` with its sender (second line of defence)."""
        self._rx_sync[peer] = _RxSync(now_s)
        out: list[Effect] = []
        self._send_sync(now_s, peer, out)
        return out

    def _close(self, now_s: float, peer: str) -> list[Effect]:
        """JGroups' closeConnection: mark both entries CLOSING (as a view without the peer does); traffic reopens
        them, conn_close_timeout removes them."""
        out: list[Effect] = []
        for direction, table in (("send", self.send_entries), ("recv", self.recv_entries)):
            entry = table.get(peer)
            if entry is not None and entry.state == OPEN:
                entry.state = CLOSING
                entry.closing_since_s = now_s
                out.append(self._conn_state(peer, direction, CLOSING, entry.conn_id))
        return out

    def _remove(self, now_s: float, peer: str) -> list[Effect]:
        self._rx_sync.pop(peer, None)
        self._replaced.pop(peer, None)
        return super()._remove(now_s, peer)

    def _remove_receive(self, now_s: float, peer: str, state: str) -> list[Effect]:
        self._rx_sync.pop(peer, None)
        self._replaced.pop(peer, None)
        return super()._remove_receive(now_s, peer, state)

    def _view_changed(self, now_s: float) -> list[Effect]:
        out: list[Effect] = []
        for direction, table in (("send", self.send_entries), ("recv", self.recv_entries)):
            for peer, entry in table.items():
                member = self.is_member(peer)
                if not member and entry.state == OPEN:
                    entry.state = CLOSING
                    entry.closing_since_s = now_s
                    out.append(self._conn_state(peer, direction, CLOSING, entry.conn_id))
                elif member and entry.state == CLOSING:
                    entry.state = OPEN
                    entry.closing_since_s = None
                    out.append(self._conn_state(peer, direction, OPEN, entry.conn_id))
        return out

    def _needs_timer(self) -> bool:
        if self._rx_sync:
            return True
        if self._expiry_s and (self.send_entries or self.recv_entries):
            return True  # idle connections age
        for rx in self.recv_entries.values():
            w = rx.window
            if (rx.ack_pending or rx.delivered_since_ack or w.highest_received > w.highest_delivered
                    or rx.state == CLOSING):
                return True
        for tx in self.send_entries.values():
            if tx.window.msgs or tx.syncing or tx.sync_deferred or tx.state == CLOSING:
                return True
        return False

    def _expire_idle(self, now_s: float, out: list[Effect]) -> None:
        """conn_expiry_timeout: an OPEN connection unused that long becomes CLOSING (traffic reopens it)."""
        for direction, table in (("send", self.send_entries), ("recv", self.recv_entries)):
            for peer, entry in table.items():
                if entry.state == OPEN and now_s - entry.active_s >= self._expiry_s:
                    entry.state = CLOSING
                    entry.closing_since_s = now_s
                    out.append(self._conn_state(peer, direction, CLOSING, entry.conn_id, reason="expired"))

    def _check_stuck(self, now_s: float, peer: str, entry: ReceiveEntry, out: list[Effect]) -> None:
        """A gap that has held delivery for a sync timeout although it is asked for every run: the sender's
        resends keep missing (it released what we lack: a forged ACK, or acks of another window). Ask the
        sender for its stream (SYNC; its SYNC-OK's low skips what it no longer has), again after another sync
        timeout if still stuck."""
        w = entry.window
        if not w.has_gaps():
            entry.stuck_since_s = None
            return
        if entry.stuck_since_s is None or entry.stuck_at != w.highest_delivered:
            entry.stuck_since_s, entry.stuck_at = now_s, w.highest_delivered
            return
        if now_s - entry.stuck_since_s >= self._sync_timeout_s:
            entry.stuck_since_s = now_s
            entry.counters["stuck_syncs"] += 1
            self._ask_sync(now_s, peer, out)

    def _xmit_task(self, now_s: float) -> list[Effect]:
        out: list[Effect] = []
        if self._expiry_s:
            self._expire_idle(now_s, out)
        for peer, rx in list(self.recv_entries.items()):
            if (rx.state == CLOSING and rx.closing_since_s is not None
                    and now_s - rx.closing_since_s >= self._close_s):
                out += super()._remove_receive(now_s, peer, "closed")
                continue
            if rx.ack_pending or rx.delivered_since_ack:
                self._send_ack(peer, rx, out)
            self._xmit_requests(peer, rx, rx.conn_id, out)
            self._check_stuck(now_s, peer, rx, out)
        for peer, pending in list(self._rx_sync.items()):
            if now_s - pending.started_s >= self._sync_timeout_s:
                del self._rx_sync[peer]
                self.counters["sync_timeouts"] += 1
                out.append(Emit("resync_timeout", {"proto": self.NAME, "peer": peer, "side": "recv"}))
            elif now_s - self._last_sync_tx_s.get(peer, float("-inf")) >= self._sync_min_s:
                self._send_sync(now_s, peer, out)
        for peer, tx in list(self.send_entries.items()):
            if (tx.state == CLOSING and tx.closing_since_s is not None
                    and now_s - tx.closing_since_s >= self._close_s):
                del self.send_entries[peer]
                if self.is_member(peer):
                    out.append(Send(peer, UnicastClose(tx.conn_id)))
                out.append(self._conn_state(peer, "send", "closed", tx.conn_id))
                continue
            if (self._max_retransmit_s and tx.window.msgs and not self.is_member(peer)
                    and now_s - tx.last_ack_s >= self._max_retransmit_s):
                del self.send_entries[peer]
                out.append(self._conn_state(peer, "send", "removed", tx.conn_id))
                continue
            started_s = tx.sync_started_s
            if tx.syncing and started_s is not None:
                if now_s - started_s >= self._sync_timeout_s:
                    tx.syncing = False
                    tx.counters["sync_timeouts"] += 1
                    out.append(Emit("resync_timeout", {"proto": self.NAME, "peer": peer, "side": "send"}))
                else:
                    self._send_sync_ok(now_s, peer, tx, out)
            elif tx.sync_deferred and (started_s is None or now_s - started_s >= self._sync_min_s):
                self._start_sync(now_s, peer, tx, out)
            if tx.xmit_served_s:
                low = tx.window.low
                tx.xmit_served_s = {seqno: at_s for seqno, at_s in tx.xmit_served_s.items()
                                    if seqno > low and now_s - at_s < self.xmit_s}
            self._tail_resend(peer, tx, out)
        return out
