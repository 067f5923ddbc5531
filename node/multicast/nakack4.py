"""NAKACK4 (seed nakack4-design.txt): reliable multicast over fixed ring buffers, with a blocking sender. Sans-IO.

Sender (the local member's own messages):
- `send {payload}` takes the next seqno S if S - low <= capacity and sends one `Nakack4Msg` per other member of
  the current view (the runtime bundles them); the send that fills the window emits `window_full`. A send
  while the window is full raises `WindowFull` (nothing taken): the caller waits for `window_unblocked` (with
  `blocked_ms`) and sends again. `close` wakes a blocked sender; sends then raise `SenderClosed`.
- Acks: the highest ack of every receiver; when their minimum rises, `low` rises (room again). ACKs from
  anyone else (a non-member, an ACK above what was sent) are discarded: they cannot block or unblock anyone.
- Retransmit task (every `xmit_interval`, armed only while there is work): an idle sender with unacked messages
  sends `Nakack4Highest` so a lost tail is asked for; `XMIT_REQ`s are answered with `Nakack4XmitRsp` of the
  messages still held (`xmit_req_rx` names what was found and what is no longer held); a seqno resent to a
  member in answer to a request is not resent again to it within an xmit_interval (`repeats`: a receiver asks
  once per run, anyone can ask in its name).
Receiver (one window per sender):
- accepts low < seqno <= low + capacity, drops and counts the rest (`below_window`, `outside_window`), delivers
  in order; an ACK (highest delivered, `delivered_high`: never a seqno a state made us skip) leaves after
  `ack_threshold` deliveries or with the next task run, which
  also sends an `XMIT_REQ` to the sender for the gaps that persist (JGroups' xmit task: only seqnos already
  missing at the previous run, so reordering is not asked for; up to `max_xmit_req_size` seqnos; a seqno
  already asked for is asked again after 2, 4, 8, ... runs (at most 1 s), so answers in flight are not asked
  twice).
Views: a member that left stops holding `low` back (which can release a blocked sender); its unacked messages
and its window are retained for `retain_departed_ms` so it gets everything if it comes back after a partition.
A member the view adds is synchronised by the broadcast-link start sync (`sync.py`: `tipc` or `legacy`); the
BcastState it gets is the digest entry of that sender (views carry no digest here). Under tipc a kept window
that the view re-activates accepts nothing and asks for nothing until a BcastState of its sender newer than its
departure arrives (it asks for one with `BcastStateReq`); the BcastState is resent until the ACK echoing its
generation comes back, and a sender asked for seqnos it no longer holds answers with its BcastState (the
receiver skips what is gone). Legacy keeps the seed's race.
Skips the sender contradicts (tipc; nothing a datagram says can silence a member for good): a BcastState may
skip a window up, or open one, past seqnos never delivered, and a forged or stale one can name any low (one
forged `BcastState(16385, 16383)` once made every later multicast of its sender `below_window`). So a window
remembers `delivered_high`, the highest seqno it delivered, apart from `low`. An original multicast (not a
resend) or a HIGHEST of the sender naming a seqno in (delivered_high, low] is the sender's own traffic saying the
skip was wrong (or the message was late): counted `contradicted_skip` (`data_rx` below_window with reason
`contradicts_skip`), and the window asks the sender for its state (`BcastStateReq`, again at every task run
until a state comes, rate-limited). The next BcastState of that sender may then move the window DOWN to its
low_seqno - 1, never below delivered_high (nothing delivered is delivered again): `skips_undone`,
`seqnos_reopened`, `bcast_window` with `reopened`; the reopened seqnos are asked for as any gap. The real
sender's answer carries low = its ack of us + 1, and since we ack only what we delivered (a forged low is never
acked, and would be discarded as above what it sent), that is where its stream resumes, in order, once. A
state that agrees with the skip (a late original of a legitimate skip: the real low) reopens nothing
(`skips_confirmed`). A forged answer can move the window down at most to delivered_high; if the sender no
longer holds what is then asked for, it answers with its state and the window skips up again. Legacy windows
are never skipped by a state, so never contradicted.
Windows ahead of their sender (tipc; the sender is the authority over its stream): forged messages delivered in
a sender's name (above a forged skip, or contiguous ones at the window's edge) put a window past anything that
sender sent; its real multicasts are then `below_window` until its stream gets there. Our ACKs say so: an ACK
above what we sent (`acks_above_sent`: no life of ours sent it) means the receiver holds a message at every
seqno we sent, so all of it counts as acked, and starts a sync episode whose BcastStates carry the AHEAD bit
(sync.py) until the receiver acks it (`resyncs_on_ack_above_sent`). A receiver whose window's low lies above
such a state's highest seqno starts the window again at the state's low (all the sender had sent then):
`windows_restarted`. Nothing is delivered twice; what the sender sent while the window was ahead is lost, at
most as many messages as forged ones were delivered. A state without the bit, even a stale one, never moves a
window down but for a contradicted skip: a legitimate window is never ahead of its sender, so no run without
forgeries restarts one; a forged AHEAD state restarts nothing that is not ahead of the sender's word (a forged
ACK above what was sent releases what the receiver lacks, as a forged ACK of what was sent always did).
Bounds: every field of every message is checked against this member's own state before it drives a loop or an
allocation (rules and drop names: bounds.py); out-of-range messages are counted in `counters` and emitted
(`data_rx` / `ack_rx` / `xmit_req_rx` / `bcast_state_rx` with `action: discarded` and a `reason`, or
`msg_dropped` for message types without an rx event).
`send_atomic` and the `stall_ms` argument of `send` model concurrent application threads (see sender.py).
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, ClassVar, Hashable, Iterable

from node.core import BatchingProtocol, Deliver, Effect, Emit, Send, SetTimer, payload_arg, payload_msg_id
from node.errors import ConfigError, UsageError
from node.multicast.bounds import SEQNO_MAX, state_problem, xmit_req_problem
from node.multicast.config import SYNC_MODES, Nakack4Config
from node.multicast.errors import SenderClosed, WindowFull
from node.multicast.receiver import RecvEntry
from node.multicast.ring import BELOW_WINDOW, NEW, ReceiveWindow, SendWindow
from node.multicast.sender import Blocking, Departed, SendLock
from node.multicast.sync import AHEAD, StartSync, gen_of
from node.wire import (HEAD_BYTES, MAX_DATAGRAM_BYTES, MAX_SENDER_BYTES, SYNC_CAPABLE, BcastState, BcastStateReq,
                       Nakack4Ack, Nakack4Highest, Nakack4Msg, Nakack4XmitReq, Nakack4XmitRsp)

XMIT_TIMER = "xmit"
CONTRADICTION_WAIT_SYNCS = 5  # a contradicted skip holds delivery for the sender's state this many sync intervals
XMIT_BACKOFF_MAX_S = 1.0  # a seqno asked for is asked again after 2, 4, 8, ... xmit intervals, at most this
# datagram header with the longest sender name, one message head, the fixed fields of a Nakack4Msg
MAX_PAYLOAD_BYTES = MAX_DATAGRAM_BYTES - (HEAD_BYTES + MAX_SENDER_BYTES + 2) - 3 - 12
ALL_MESSAGES: tuple[type, ...] = (Nakack4Msg, Nakack4XmitReq, Nakack4XmitRsp, Nakack4Highest, Nakack4Ack, BcastState,
                                  BcastStateReq)


class Nakack4(BatchingProtocol):
    """NAKACK4 for member `local`; `members` is the initial view (every window and ack starting at 0)."""

    NAME: ClassVar[str] = "nakack4"
    MESSAGES: ClassVar[tuple[type, ...]] = ALL_MESSAGES

    def __init__(self, local: str, config: Nakack4Config, members: Iterable[str] | None = None,
                 bcast_sync: str = "tipc") -> None:
        if bcast_sync not in SYNC_MODES:
            raise ConfigError(f"unknown bcast_sync {bcast_sync!r}", hint=f"valid: {', '.join(SYNC_MODES)}")
        self.local = local
        self.config = config
        self.members: tuple[str, ...] = tuple(members) if members is not None else (local,)
        self.known: set[str] = set(self.members)  # every member any of our views held: per-peer state only for them
        self.view_id: tuple[str, int] | None = None
        self.send = SendWindow(config.capacity)
        self.acks: dict[str, int] = {m: 0 for m in self.members if m != local}
        self.departed: dict[str, Departed] = {}
        self.windows: dict[str, RecvEntry] = {m: RecvEntry(ReceiveWindow(config.capacity)) for m in self.acks}
        self.delivered_up_to: dict[str, int] = {}  # delivered_high of senders whose window was dropped
        self.sync = StartSync(bcast_sync, config.sync_interval_ms / 1000)
        self.blocking = Blocking()
        self.lock = SendLock()
        self.closed = False
        self.counters: Counter = Counter()
        self._stalled: dict[int, bytes] = {}  # seqno -> payload taken but not yet sent (stall_ms without atomic)
        self._xmit_s = config.xmit_interval_ms / 1000
        self._retain_s = config.retain_departed_ms / 1000
        self._contradiction_wait_s = CONTRADICTION_WAIT_SYNCS * config.sync_interval_ms / 1000
        self._xmit_limit = min(config.max_xmit_req_size, config.capacity)  # seqnos looked at per XMIT_REQ
        self._ack_threshold = config.effective_ack_threshold
        self._timer_at: float | None = None
        self._sent_since_run = False
        self._tx_high = 0  # highest seqno transmitted (a stalled thread may hold a higher taken one back)
        self._xmit_served: dict[str, dict[int, float]] = {}  # requester -> seqno -> when an XMIT_REQ had it resent
        self._handlers: dict[type, Callable[[float, str, Any], list[Effect]]] = {
            Nakack4Msg: self._on_msg, Nakack4XmitRsp: self._on_msg, Nakack4XmitReq: self._on_xmit_req,
            Nakack4Highest: self._on_highest, Nakack4Ack: self._on_ack, BcastState: self._on_state,
            BcastStateReq: self._on_state_req}

    # --- sans-IO entry points ---------------------------------------------------------------------------------
    def _after(self, now_s: float, effects: list[Effect]) -> list[Effect]:
        """After every event, or a datagram's messages (`node.core.BatchingProtocol`): the retransmit timer is
        armed when work appeared."""
        if self._timer_at is None and self._needs_timer():
            self._timer_at = now_s + self._xmit_s
            effects.append(SetTimer(XMIT_TIMER, self._timer_at))
        return effects

    def on_timer(self, now_s: float, key: Hashable) -> list[Effect]:
        if key == XMIT_TIMER:
            self._timer_at = None
            return self._xmit_task(now_s)
        if isinstance(key, tuple) and key[0] == "tx":
            return self._stalled_send_due(now_s, key[1])
        if isinstance(key, tuple) and key[0] == "expire":
            return self._expire(now_s, key[1])
        return []

    def on_received(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        if type(msg) is Nakack4Msg:  # most messages: a direct call (compiled: not the table's bound method)
            return self._on_msg(now_s, src, msg)
        return self._handlers[type(msg)](now_s, src, msg)

    def on_request(self, now_s: float, op: str, args: dict[str, Any]) -> list[Effect]:
        """Requests: `send {payload[, stall_ms]}` (raises WindowFull when the window is full, SenderClosed after
        `close`), `close` (wakes a blocked sender; later sends fail). Raises UsageError for bad requests."""
        if op == "send":
            self._check_open()
            payload = payload_arg(args, MAX_PAYLOAD_BYTES, f"{self.NAME} send")
            stall_ms = args.get("stall_ms")
            if stall_ms is None:
                return self.on_send(now_s, "*", payload)
            if isinstance(stall_ms, bool) or not isinstance(stall_ms, (int, float)) or stall_ms < 0:
                raise UsageError(f"{self.NAME} send: stall_ms must be a number >= 0, got {stall_ms!r}")
            return self._send_threaded(now_s, payload, stall_ms / 1000)
        if op == "close":
            return self._close(now_s)
        raise UsageError(f"{self.NAME}: unknown request {op!r}", hint="requests: send {payload}, close")

    def on_send(self, now_s: float, to: str, payload: bytes) -> list[Effect]:
        """A multicast (`to` is "*") of a checked payload: the `send` request without a stall (a node's workloads
        send this way). Raises SenderClosed after `close`, WindowFull when the window is full."""
        self._check_open()
        if self.config.send_atomic and self.lock.busy:
            self.lock.queue.append((payload, 0.0))
            return []
        return self._send_now(now_s, payload)

    def _check_open(self) -> None:
        if self.closed:
            raise SenderClosed(f"{self.NAME}: the sender of {self.local} is closed")

    def on_view(self, now_s: float, view_id: tuple[str, int], members: tuple[str, ...]) -> list[Effect]:
        old, new = set(self.members), set(members)
        self.view_id = (view_id[0], view_id[1])
        self.members = tuple(members)
        self.known.update(members)
        out: list[Effect] = []
        for peer in sorted(old - new - {self.local}):
            out += self._receiver_left(now_s, peer)
        for peer in sorted(new - old - {self.local}):
            out += self._receiver_added(now_s, peer)
        out += self._purge(now_s)
        return out

    def on_peer_restarted(self, now_s: float, peer: str) -> list[Effect]:
        """`peer` restarted: its seqnos start again at 1 and it has no window for ours. Its old receive window
        goes (its next message asks for its state, as a newcomer's would), and it is added again as a receiver
        of ours: a BcastState tells it where our messages start for it, and its acks count from there.
        A peer the view has excluded (suspected while it was down) loses what its old life left just the same:
        the window kept for its return would hold its new seqnos below its old low; it is added when a view
        brings it back, and is owed what was sent from its new life on (kept as for a departed member)."""
        if peer == self.local or peer not in self.known:
            return []
        self.windows.pop(peer, None)
        self.delivered_up_to.pop(peer, None)  # a new life: its seqnos start again
        self.acks.pop(peer, None)
        if self.departed.pop(peer, None) is not None:
            self._release()
        self.sync.remove_receiver(peer)
        self.sync.legacy_peers.discard(peer)  # what a new life speaks its own messages say (a forged one lied)
        self.counters["peers_restarted"] += 1
        if peer not in self.members:
            # owed what we send from now on, kept as for a departed member until a view brings it back: a life
            # that was not really new (a forged incarnation was taken for its life) loses nothing sent later
            self.departed[peer] = Departed(self.send.high, now_s)
            return []
        out = self._receiver_added(now_s, peer)
        out += self._purge(now_s)
        return out

    # --- sending ----------------------------------------------------------------------------------------------
    def _check_room(self) -> None:
        if not self.send.has_room():
            self.counters["refused"] += 1
            raise WindowFull(self.NAME, self.send.high + 1, self.send.low, self.send.capacity)

    def _take(self, now_s: float, payload: bytes, out: list[Effect]) -> int:
        """Take the next seqno for `payload`; emits window_full when this fills the window."""
        seqno = self.send.append(payload)
        if not self.acks:
            self.send.set_low(seqno)  # nobody else in the view: nothing to wait for
            self._release()
        if not self.send.has_room() and self.blocking.block(now_s):
            out.append(Emit("window_full", {"proto": self.NAME, "seqno": seqno, "low": self.send.low,
                                            "capacity": self.send.capacity}))
        return seqno

    def _transmit(self, seqno: int, payload: bytes, out: list[Effect]) -> None:
        msg = Nakack4Msg(seqno, payload)
        out += [Send(m, msg) for m in self.members if m != self.local]
        out.append(Emit("data_tx", {"proto": self.NAME, "to": "*", "seqno": seqno, "conn_id": 0, "first": False,
                                    "resend": False, "size": len(payload), "msg_id": payload_msg_id(payload)}))
        self.counters["sent"] += 1
        self._sent_since_run = True
        self._tx_high = max(self._tx_high, seqno)

    def _send_now(self, now_s: float, payload: bytes) -> list[Effect]:
        self._check_room()
        out: list[Effect] = []
        seqno = self._take(now_s, payload, out)
        self._transmit(seqno, payload, out)
        return out

    def _send_threaded(self, now_s: float, payload: bytes, stall_s: float) -> list[Effect]:
        """A send by a thread that is descheduled for `stall_s` between taking its seqno and sending."""
        if self.config.send_atomic:
            self.lock.queue.append((payload, stall_s))
            return self._run_lock(now_s) if self.lock.holder is None else []
        self._check_room()
        out: list[Effect] = []
        seqno = self._take(now_s, payload, out)
        self._stalled[seqno] = payload
        out.append(SetTimer(("tx", seqno), now_s + stall_s))
        return out

    def _run_lock(self, now_s: float) -> list[Effect]:
        """send_atomic: let queued sends take the lock in turn while the window has room."""
        out: list[Effect] = []
        while self.lock.holder is None and self.lock.queue and self.send.has_room() and not self.closed:
            payload, stall_s = self.lock.queue.popleft()
            seqno = self._take(now_s, payload, out)
            if stall_s <= 0:
                self._transmit(seqno, payload, out)
                continue
            self.lock.holder = seqno
            self._stalled[seqno] = payload
            out.append(SetTimer(("tx", seqno), now_s + stall_s))
        return out

    def _stalled_send_due(self, now_s: float, seqno: int) -> list[Effect]:
        payload = self._stalled.pop(seqno, None)
        out: list[Effect] = []
        if payload is not None:
            self._transmit(seqno, payload, out)
        if self.lock.holder == seqno:
            self.lock.holder = None
            out += self._run_lock(now_s)
        return out

    def _close(self, now_s: float) -> list[Effect]:
        self.closed = True
        self.lock.queue.clear()
        blocked_s = self.blocking.unblock(now_s)
        if blocked_s is None:
            return []
        return [Emit("window_unblocked", {"proto": self.NAME, "blocked_ms": round(blocked_s * 1000, 3),
                                          "closed": True})]

    # --- acks, purging, views (sender side) --------------------------------------------------------------------
    def _release(self) -> None:
        floor = min([self.send.low] + [d.ack for d in self.departed.values()])
        self.send.release(floor)

    def _purge(self, now_s: float) -> list[Effect]:
        """Move low to the minimum ack and release what nobody needs; block or unblock accordingly."""
        low = min(self.acks.values()) if self.acks else self.send.high
        if self.send.set_low(low):
            self._release()
        out: list[Effect] = []
        if not self.send.has_room():  # a receiver came back with an older ack: hold its messages first
            if self.blocking.block(now_s):
                out.append(Emit("window_full", {"proto": self.NAME, "seqno": self.send.high, "low": self.send.low,
                                                "capacity": self.send.capacity}))
        else:
            blocked_s = self.blocking.unblock(now_s)
            if blocked_s is not None:
                out.append(Emit("window_unblocked", {"proto": self.NAME, "blocked_ms": round(blocked_s * 1000, 3),
                                                     "low": self.send.low}))
            if self.lock.queue and self.lock.holder is None:
                out += self._run_lock(now_s)
        return out

    def _on_ack(self, now_s: float, src: str, msg: Nakack4Ack) -> list[Effect]:
        out: list[Effect] = []
        if src in self.members:
            self.sync.note_flags(src, msg.flags)
        action, reason = "discarded", None
        if msg.seqno > self.send.high:
            self.counters["acks_above_sent"] += 1
            reason = "above_sent"
            if src in self.acks and not self.sync.legacy_with(src):
                # its window is ahead of everything we sent (forged messages delivered in our name): it holds a
                # message at every seqno we sent, so they are acked; tell it where our stream is (a state marked
                # AHEAD, low above all we sent: "Windows ahead of their sender")
                self.acks[src] = self.send.high
                out += self._resync(now_s, src, "ack_above_sent", again_now=False, ahead=True)
                out += self._purge(now_s)
        elif src in self.acks:
            ends, _ = self.sync.acked(src, msg.flags)
            if ends:
                self.counters["states_acked"] += 1
            elif gen_of(msg.flags):
                self.counters["state_acks_stale"] += 1  # it answers another episode's state: ours goes on
            if msg.seqno > self.acks[src]:
                self.acks[src] = msg.seqno
            action = "accepted"
        elif src in self.members and self.sync.acked(src, msg.flags)[1]:  # legacy: its first ACK: a receiver
            self.acks[src] = msg.seqno
            action = "accepted"
        else:
            self.counters["acks_from_non_members"] += 1
            reason = "not_member"
        event = {"proto": self.NAME, "from": src, "seqno": min(msg.seqno, SEQNO_MAX), "conn_id": 0,
                 "action": action}
        if reason is not None:
            event["reason"] = reason
            if msg.seqno > SEQNO_MAX:
                event["detail"] = f"seqno {msg.seqno}"
        out.append(Emit("ack_rx", event))
        if src in self.members and src not in self.windows:
            guess = self.sync.guess_on_ack(src)
            if guess is not None:  # legacy: the peer is up, start its window from our own guess
                self._new_window(src, guess, "guess", out)
        if action == "accepted":
            self.counters["acks_accepted"] += 1
            out += self._purge(now_s)
        return out

    def _receiver_left(self, now_s: float, peer: str) -> list[Effect]:
        out: list[Effect] = []
        ack = self.acks.pop(peer, None)
        self.sync.remove_receiver(peer)
        entry = self.windows.get(peer)
        if self._retain_s > 0:
            if ack is not None:
                self.departed[peer] = Departed(ack, now_s)
            if entry is not None:
                entry.retained_since_s = now_s
                entry.awaiting_state = False  # retained: takes what arrives, asks for nothing
                entry.needs_state = not self.sync.legacy_with(peer)
            out.append(SetTimer(("expire", peer), now_s + self._retain_s))
        elif entry is not None:
            self._drop_window(peer)
        self.counters["receivers_left"] += 1
        return out

    def _receiver_added(self, now_s: float, peer: str) -> list[Effect]:
        out: list[Effect] = []
        entry = self.windows.get(peer)
        if entry is not None:
            entry.retained_since_s = None
            entry.prev_highest_missing = None
            if entry.needs_state and not self.sync.legacy_with(peer):
                # TIPC: accept nothing before the BcastState (the sender may have purged what we lack)
                entry.awaiting_state = True
                self.counters["windows_awaiting_state"] += 1
                out.append(Emit("bcast_window", {"proto": self.NAME, "peer": peer, "low": entry.window.low,
                                                 "how": "awaiting"}))
                self._ask_state(now_s, peer, out)
        departed = self.departed.pop(peer, None)
        low_seqno = self.send.high + 1
        if departed is not None:
            low_seqno = max(departed.ack + 1, self.send.oldest_held())
        counts, msg = self.sync.add_receiver(now_s, peer, self.send.high + 1, low_seqno)
        if counts:
            self.acks[peer] = msg.low_seqno - 1
        elif departed is not None:
            self.departed[peer] = departed  # legacy: keep its messages until its first ACK or the expiry
        self.counters["receivers_added"] += 1
        return out + [Send(peer, msg), self._state_event("bcast_state_tx", peer, msg)]

    def _drop_window(self, peer: str) -> None:
        """Forget the window of `peer`, but not how far we delivered: a state that starts a new window below it
        (our last ack to it was lost) must not deliver those messages twice. (What a skip gave up is not kept:
        the next state says again what is gone.)"""
        self.delivered_up_to[peer] = self.windows.pop(peer).delivered_high

    def _expire(self, now_s: float, peer: str) -> list[Effect]:
        if peer in self.members:
            return []
        departed = self.departed.get(peer)
        if departed is not None and now_s - departed.since_s >= self._retain_s - 1e-9:
            del self.departed[peer]
            self._release()
        entry = self.windows.get(peer)
        since_s = entry.retained_since_s if entry is not None else None
        if entry is not None and since_s is not None and now_s - since_s >= self._retain_s - 1e-9:
            self._drop_window(peer)
            self.counters["windows_expired"] += 1
        return []

    def _on_xmit_req(self, now_s: float, src: str, msg: Nakack4XmitReq) -> list[Effect]:
        if msg.sender != self.local:
            self.counters["xmit_reqs_for_others"] += 1  # only original senders retransmit here
            return [self._xmit_req_discarded(src, msg.seqnos[:self._xmit_limit], "not_original_sender")]
        seqnos = msg.seqnos[:self._xmit_limit]  # the rest: the requester's next run asks again
        if len(msg.seqnos) > len(seqnos):
            self.counters["xmit_seqnos_over_limit"] += len(msg.seqnos) - len(seqnos)
        problem = xmit_req_problem(seqnos, self.send.high)
        ignored = 0
        if problem is not None:
            # seqnos we never sent: the requester's window took a forged or stale high. Serve the rest (the
            # window must not wait behind them) and leave it to ask for those until our stream gets there
            self.counters[f"xmit_reqs_{problem}"] += 1
            valid = tuple(s for s in seqnos if 0 < s <= self.send.high)
            ignored = len(seqnos) - len(valid)
            if not valid:
                return [self._xmit_req_discarded(src, seqnos, problem)]
            seqnos = valid
        out: list[Effect] = []
        found: list[int] = []
        missing: list[int] = []
        repeats: list[int] = []
        # a receiver asks for a seqno at most once per retransmit run: one resent to `src` in answer to a request
        # less than an xmit_interval ago is not resent again (anyone can send an XMIT_REQ in a member's name, and
        # the resends go to the member)
        served = self._xmit_served.setdefault(src, {}) if src in self.known else None
        for seqno in seqnos:
            payload = self.send.get(seqno)
            if payload is None:
                missing.append(seqno)
                continue
            if served is not None:
                if now_s - served.get(seqno, -1.0) < self._xmit_s:
                    repeats.append(seqno)
                    continue
                served[seqno] = now_s
            found.append(seqno)
            out.append(Send(src, Nakack4XmitRsp(seqno, payload)))
            out.append(Emit("data_tx", {"proto": self.NAME, "to": src, "seqno": seqno, "conn_id": 0,
                                        "first": False, "resend": True, "size": len(payload)}))
            if seqno in self._stalled:
                self.counters["resent_before_sent"] += 1
        self.counters["resent"] += len(found)
        self.counters["xmit_missing"] += len(missing)
        event: dict[str, Any] = {"proto": self.NAME, "from": src, "seqnos": list(seqnos), "found": found,
                                 "missing": missing}
        if len(msg.seqnos) > len(seqnos) + ignored:
            event["over_limit"] = len(msg.seqnos) - len(seqnos) - ignored
        if ignored:
            event.update(ignored=ignored, reason=problem)
        if repeats:
            event["repeats"] = repeats
            self.counters["xmit_repeats_ignored"] += len(repeats)
        out.append(Emit("xmit_req_rx", event))
        if missing and src in self.acks and not self.sync.legacy_with(src):
            # it lacks seqnos we no longer hold (a window not synchronised by our state, or one moved back down
            # below what it had acked): tell it where we are
            out += self._resync(now_s, src, "xmit_missing", again_now=False)
        return out

    def _xmit_req_discarded(self, src: str, seqnos: tuple[int, ...], reason: str) -> Emit:
        return Emit("xmit_req_rx", {"proto": self.NAME, "from": src, "seqnos": [min(s, SEQNO_MAX) for s in seqnos],
                                    "found": [], "missing": [], "action": "discarded", "reason": reason})

    def _resync(self, now_s: float, peer: str, why: str, again_now: bool, ahead: bool = False) -> list[Effect]:
        """Send receiver `peer` our BcastState: a new episode (resent until its ACK), or the one under way if
        `again_now` (else the retransmit task resends that one). `ahead`: marked AHEAD until the episode ends."""
        item = self.sync.outgoing.get(peer)
        under_way = item is not None and not item.frozen
        if under_way and not again_now:
            if ahead:
                self.sync.mark_ahead(peer)
            return []
        if not under_way:
            self.counters[f"resyncs_on_{why}"] += 1
        state = self.sync.resync(now_s, peer, self.send.high + 1, self.acks[peer] + 1, ahead)
        return [Send(peer, state), self._state_event("bcast_state_tx", peer, state)]

    def _on_state_req(self, now_s: float, src: str, msg: BcastStateReq) -> list[Effect]:
        if src not in self.acks:  # (also the normal race of a merge: it installed the view before we did)
            self.counters["state_reqs_ignored"] += 1
            return []
        self.sync.note_flags(src, msg.flags)
        if self.sync.legacy_with(src):
            state = BcastState(self.send.high + 1, self.acks[src] + 1, self.sync.flags)
            return [Send(src, state), self._state_event("bcast_state_tx", src, state)]
        return self._resync(now_s, src, "request", again_now=True)  # (the receiver rate-limits its requests)

    def _state_event(self, type_: str, peer: str, msg: BcastState) -> Emit:
        event = {"peer": peer, "next_seqno": msg.next_seqno, "low": msg.low_seqno, "gen": gen_of(msg.flags),
                 "sync": self.sync.mode if type_.endswith("_tx") else
                 ("tipc" if msg.flags & SYNC_CAPABLE else "legacy")}
        if msg.flags & SYNC_CAPABLE and msg.flags & AHEAD:
            event["ahead"] = True
        return Emit(type_, event)

    def _dropped(self, src: str, msg: Any, reason: str, detail: str) -> Emit:
        """A message without an rx event of its own, dropped (history `msg_dropped`)."""
        return Emit("msg_dropped", {"proto": self.NAME, "from": src, "msg": type(msg).__name__, "reason": reason,
                                    "detail": detail})

    # --- receiving --------------------------------------------------------------------------------------------
    def _new_window(self, peer: str, low: int, how: str, out: list[Effect],
                    delivered_high: int | None = None) -> RecvEntry:
        """A window for `peer` starting at `low`; `delivered_high` (default `low`) is how far we delivered its
        messages: below `low` when a tipc state opens the window (what lies between may be contradicted)."""
        entry = RecvEntry(ReceiveWindow(self.config.capacity, low), delivered_high=low if delivered_high is None
                          else delivered_high)
        self.windows[peer] = entry
        self.counters[f"windows_by_{how}"] += 1
        out.append(Emit("bcast_window", {"proto": self.NAME, "peer": peer, "low": low, "how": how}))
        return entry

    def _data_rx(self, src: str, seqno: int, action: str, resend: bool, reason: str | None = None) -> Emit:
        event = {"proto": self.NAME, "from": src, "seqno": min(seqno, SEQNO_MAX), "conn_id": 0, "first": False,
                 "action": action, "resend": resend}
        if reason is not None:
            event["reason"] = reason
        if seqno > SEQNO_MAX:
            event["detail"] = f"seqno {seqno}"
        return Emit("data_rx", event)

    def _on_msg(self, now_s: float, src: str, msg: Nakack4Msg) -> list[Effect]:  # or its subclass Nakack4XmitRsp
        resend = type(msg) is Nakack4XmitRsp
        out: list[Effect] = []
        entry = self.windows.get(src)
        if entry is None or not entry.accepting:
            self.counters["no_window" if entry is None else "msgs_not_synced"] += 1
            out.append(self._data_rx(src, msg.seqno, "no_conn", resend, None if entry is None else "not_synced"))
            self._ask_state(now_s, src, out)
            return out
        if not resend and msg.seqno in entry.requested:
            del entry.requested[msg.seqno]
            entry.counters["spurious_xmit_reqs"] += 1  # the original came after all: asking was not needed
            self.counters["spurious_xmit_reqs"] += 1
        result = entry.window.add(msg.seqno, msg.payload)
        if result == BELOW_WINDOW and not resend and msg.seqno > entry.delivered_high \
                and not self.sync.legacy_with(src):
            # the sender multicasts (now) a seqno a state made us give up: that state was wrong, or stale
            entry.counters[result] += 1
            self.counters[result] += 1
            self._skip_contradicted(now_s, src, entry, out)
            out.append(self._data_rx(src, msg.seqno, result, resend, "contradicts_skip"))
            return out
        if result != NEW:
            entry.counters[result] += 1
            self.counters[result] += 1
            if resend and result != "outside_window":
                entry.counters["spurious_xmit_rsps"] += 1
                self.counters["spurious_xmit_rsps"] += 1
            if result != "outside_window":
                entry.ack_pending = True  # the sender resends what we have: it lacks our ack
            out.append(self._data_rx(src, msg.seqno, result, resend))
            return out
        ready = [] if entry.contradicted else entry.window.drain()  # a contradicted skip: wait for the state
        entry.counters["received"] += 1
        out.append(self._data_rx(src, msg.seqno, "deliver" if ready else "buffer", resend))
        self._deliver(src, entry, ready, out)
        return out

    def _deliver(self, src: str, entry: RecvEntry, ready: list[tuple[int, bytes]], out: list[Effect]) -> None:
        if not ready:
            return
        for _seqno, payload in ready:
            out.append(Deliver(src, payload, "multicast"))
        entry.delivered_high = max(entry.delivered_high, ready[-1][0])
        entry.counters["delivered"] += len(ready)
        self.counters["delivered"] += len(ready)
        entry.delivered_since_ack += len(ready)
        if entry.delivered_since_ack >= self._ack_threshold:
            self._send_ack(src, entry, out)

    def _send_ack(self, peer: str, entry: RecvEntry, out: list[Effect], gen: int = 0) -> None:
        """ACK our highest delivered seqno of `peer` (`gen`: answering its BcastState of that generation). Not
        the window's low: what a state made us skip is not acked (the real sender already counts its own state's
        low as our ack; a forged state's low must not release what we never got)."""
        entry.delivered_since_ack = 0
        entry.ack_pending = False
        seqno = entry.delivered_high
        out.append(Send(peer, Nakack4Ack(seqno, self.sync.ack_flags(gen))))
        out.append(Emit("ack_tx", {"proto": self.NAME, "to": peer, "seqno": seqno, "conn_id": 0}))

    def _ask_state(self, now_s: float, src: str, out: list[Effect]) -> None:
        if src in self.members and self.sync.may_ask(now_s, src):
            self.counters["state_reqs"] += 1
            out.append(Send(src, BcastStateReq(self.sync.flags)))

    def _skip_contradicted(self, now_s: float, src: str, entry: RecvEntry, out: list[Effect]) -> None:
        """`src`'s own traffic named a seqno in (delivered_high, window.low]: one we skipped (or a state's new
        window started above) but never delivered. Its next BcastState may move the window back down; ask for
        it now and at every retransmit run until it comes (rate-limited). Until then the window delivers
        nothing (what arrives is held): the sender's stream may resume below what it would deliver, and
        nothing is delivered out of order. A sender that does not answer within CONTRADICTION_WAIT_SYNCS
        sync intervals leaves the skip as it was (`contradictions_unanswered`)."""
        if not entry.contradicted:
            entry.contradicted_s = now_s
        entry.contradicted = True
        entry.counters["contradicted_skip"] += 1
        self.counters["contradicted_skip"] += 1
        self._ask_state(now_s, src, out)

    def _window_ahead(self, src: str, entry: RecvEntry, msg: BcastState, out: list[Effect]) -> RecvEntry:
        """A state of `src` marked AHEAD (we acked above what it sent): if the window's low is above the state's
        highest seqno (`src` never sent what the window went past: forged messages or a forged skip put it there),
        the window starts again where `src` says: at its low, all it had sent when it saw our ack, which it counts
        as acked (a new window, `windows_restarted`). Nothing is delivered twice: every seqno up to there was
        delivered here, real or forged."""
        if entry.window.low < msg.next_seqno:
            return entry
        self.counters["windows_restarted"] += 1
        return self._new_window(src, msg.low_seqno - 1, "restarted", out)

    def _on_highest(self, now_s: float, src: str, msg: Nakack4Highest) -> list[Effect]:
        out: list[Effect] = []
        if msg.seqno > SEQNO_MAX:
            self.counters["highest_absurd_seqno"] += 1
            out.append(self._dropped(src, msg, "absurd_seqno", f"seqno {msg.seqno}"))
            return out
        entry = self.windows.get(src)
        if entry is None or not entry.accepting:
            self.counters["highest_no_window" if entry is None else "highest_not_synced"] += 1
            self._ask_state(now_s, src, out)
            return out
        if msg.seqno <= entry.window.low:
            if msg.seqno > entry.delivered_high and not self.sync.legacy_with(src):
                self._skip_contradicted(now_s, src, entry, out)  # it sent what a state made us give up
            else:
                entry.ack_pending = True  # it has unacked messages we delivered: our ack was lost
        else:
            entry.window.note_highest(msg.seqno)  # at most low + capacity: O(1), later walks O(capacity)
        return out

    def _on_state(self, now_s: float, src: str, msg: BcastState) -> list[Effect]:
        problem = state_problem(msg) if src in self.known else "not_member"
        if problem is not None:
            self.counters[f"states_{problem}"] += 1
            return [Emit("bcast_state_rx", {"peer": src, "action": "discarded", "reason": problem,
                                            "detail": f"next_seqno {msg.next_seqno}, low_seqno {msg.low_seqno}"})]
        out: list[Effect] = [self._state_event("bcast_state_rx", src, msg)]
        gen = gen_of(msg.flags) if msg.flags & SYNC_CAPABLE else 0
        self.sync.note_flags(src, msg.flags)
        entry = self.windows.get(src)
        if entry is None:
            low = self.sync.start_low(src, msg)
            delivered = None
            if not self.sync.legacy_with(src):  # never below what we delivered before dropping its window
                delivered = self.delivered_up_to.get(src, 0)
                low = max(low, delivered)
            entry = self._new_window(src, low, "state", out, delivered)
            entry.synced_gen = gen
            if src not in self.members:  # no longer in our view: kept, asking for nothing, until the view adds it
                entry.retained_since_s = now_s
                out.append(SetTimer(("expire", src), now_s + max(self._retain_s, self.sync.interval_s)))
        if not self.sync.legacy_with(src):
            # the generation applied last, again: harmless for a synchronised window, but no sync for a window
            # that has been kept since (it is from before its sender left)
            if msg.flags & AHEAD:
                entry = self._window_ahead(src, entry, msg, out)
            stale = gen != 0 and gen == entry.synced_gen and (entry.needs_state or entry.awaiting_state)
            if stale:
                self.counters["states_stale"] += 1
            else:
                self._apply_state(src, entry, msg, gen, out)
        elif entry.contradicted:  # a tipc skip (its flags said tipc then) contradicted, answered the legacy way
            self._reopen_skip(src, entry, msg.low_seqno - 1, out)
        self._send_ack(src, entry, out, gen)  # tells the sender we are synchronised (legacy: our NAME_DISTR)
        return out

    def _apply_state(self, src: str, entry: RecvEntry, msg: BcastState, gen: int, out: list[Effect]) -> None:
        """A tipc BcastState of `src`: answering a contradicted skip, move the window back down to its low
        (never below what we delivered); skip what it no longer holds (O(capacity)), note its highest, and count
        the window synchronised (an awaiting one takes messages again)."""
        window = entry.window
        if entry.contradicted:
            self._reopen_skip(src, entry, msg.low_seqno - 1, out)
        if window.low + 1 < msg.low_seqno:  # it no longer holds what we miss: skip across the gap
            held, lost = window.skip_to(msg.low_seqno - 1)
            entry.counters["skipped"] += lost
            self.counters["skipped"] += lost
            entry.prev_highest_missing = None
            entry.forget_requests_up_to(window.low)
            if lost:
                out.append(Emit("bcast_skip", {"proto": self.NAME, "peer": src, "lost": lost, "low": window.low}))
            self._deliver(src, entry, held + window.drain(), out)
        window.note_highest(msg.next_seqno - 1)
        entry.synced_gen = gen
        entry.needs_state = False
        if entry.awaiting_state:
            entry.awaiting_state = False
            entry.prev_highest_missing = None
            self.counters["windows_resynced"] += 1
            out.append(Emit("bcast_window", {"proto": self.NAME, "peer": src, "low": window.low, "how": "state"}))

    def _reopen_skip(self, src: str, entry: RecvEntry, low: int, out: list[Effect]) -> None:
        """The first state of `src` since its traffic contradicted our skip: it says it holds everything above
        `low` for us, so the window goes back down there, but never below `delivered_high` (nothing delivered
        is delivered again). O(capacity). A state that agrees with the skip (a late original of a legitimate
        skip) reopens nothing: the skip is confirmed."""
        entry.contradicted = False
        to = max(low, entry.delivered_high)
        reopened = entry.window.rewind_to(to)
        if not reopened:
            entry.counters["skips_confirmed"] += 1
            self.counters["skips_confirmed"] += 1
            self._deliver(src, entry, entry.window.drain(), out)  # what arrived while the skip was in doubt
            return
        entry.requested.clear()
        entry.prev_highest_missing = None
        for counters in (entry.counters, self.counters):
            counters["skips_undone"] += 1
            counters["seqnos_reopened"] += reopened
        out.append(Emit("bcast_window", {"proto": self.NAME, "peer": src, "low": to, "how": "state",
                                         "reopened": reopened}))
        self._deliver(src, entry, entry.window.drain(), out)

    # --- the retransmit task ----------------------------------------------------------------------------------
    def _unsynced_members(self) -> list[str]:
        """tipc: members of the view we have no window for (we wait for their BcastState, and ask for it)."""
        return [m for m in self.members if m != self.local and m not in self.windows
                and not self.sync.legacy_with(m)]

    def _needs_timer(self) -> bool:
        if self.send.high > self.send.low or self.sync.outgoing or self._unsynced_members():
            return True
        for peer, entry in self.windows.items():
            if entry.delivered_since_ack or entry.ack_pending or entry.awaiting_state:
                return True
            if entry.contradicted and entry.active and not self.sync.legacy_with(peer):
                return True
            if entry.active and entry.window.has_gaps():
                return True
        return False

    def _xmit_task(self, now_s: float) -> list[Effect]:
        out: list[Effect] = []
        if self._xmit_served:  # what was resent an xmit_interval ago may be asked for again
            low = self.send.low
            for peer, served in list(self._xmit_served.items()):
                kept = {seqno: at_s for seqno, at_s in served.items() if seqno > low and now_s - at_s < self._xmit_s}
                if kept:
                    self._xmit_served[peer] = kept
                else:
                    del self._xmit_served[peer]
        limit = min(self._xmit_limit, Nakack4XmitReq.MAX_SEQNOS)
        for peer, entry in self.windows.items():
            if entry.awaiting_state:  # accepts nothing, asks for nothing but the state
                self._ask_state(now_s, peer, out)
                continue
            if entry.delivered_since_ack or entry.ack_pending:
                self._send_ack(peer, entry, out)
            if entry.contradicted and now_s - entry.contradicted_s >= self._contradiction_wait_s:
                entry.contradicted = False  # no answer: the skip stands, what was held is delivered
                entry.counters["contradictions_unanswered"] += 1
                self.counters["contradictions_unanswered"] += 1
                self._deliver(peer, entry, entry.window.drain(), out)
            if entry.contradicted:  # until a state of the sender comes (the request may have been rate-limited)
                self._ask_state(now_s, peer, out)
            entry.forget_requests_up_to(entry.window.low - entry.window.capacity)
            if not entry.active or not entry.window.has_gaps():
                entry.prev_highest_missing = None
                continue
            missing = entry.persistent_gaps(entry.window.missing(limit))
            missing = entry.to_ask(now_s, missing, self._xmit_s, XMIT_BACKOFF_MAX_S) if missing else missing
            if missing:
                entry.counters["xmit_reqs"] += 1
                out.append(Send(peer, Nakack4XmitReq(peer, tuple(missing))))
                out.append(Emit("xmit_req_tx", {"proto": self.NAME, "to": peer, "seqnos": missing}))
        for peer in self._unsynced_members():  # an idle sender would never make us ask: ask now
            self._ask_state(now_s, peer, out)
        for peer, msg in self.sync.due(now_s, self.send.high + 1, {p: a + 1 for p, a in self.acks.items()}):
            out.append(Send(peer, msg))
            out.append(self._state_event("bcast_state_tx", peer, msg))
        high = self._tx_high
        if high > self.send.low and not self._sent_since_run:
            lagging = [m for m in self.members if m != self.local and self.acks.get(m, -1) < high]
            if lagging:
                self.counters["highest_sent"] += 1
            out += [Send(m, Nakack4Highest(high)) for m in lagging]
        self._sent_since_run = False
        return out

    # --- state ------------------------------------------------------------------------------------------------
    @property
    def blocked(self) -> bool:
        return self.blocking.since_s is not None

    def state(self, now_s: float) -> dict[str, Any]:
        """JSON-able state: the send window with acks and blocking, every receive window, the view, counters."""
        w = self.send
        return {
            "proto": self.NAME, "local": self.local, "bcast_sync": self.sync.mode,
            "view_id": None if self.view_id is None else list(self.view_id), "members": list(self.members),
            "config": self.config.as_dict(),
            "send": {"low": w.low, "highest_sent": w.high, "unacked": w.unacked, "capacity": w.capacity,
                     "oldest_held": w.oldest_held(), "acks": dict(sorted(self.acks.items())),
                     "departed": {p: {"ack": d.ack, "ago_ms": round((now_s - d.since_s) * 1000)}
                                  for p, d in sorted(self.departed.items())},
                     "syncing": sorted(self.sync.outgoing), "pending_receivers": sorted(self.sync.pending),
                     "queued": len(self.lock.queue), "closed": self.closed, **self.blocking.to_state(now_s)},
            "windows": {p: e.to_state() for p, e in sorted(self.windows.items())},
            "legacy_peers": sorted(self.sync.legacy_peers),
            "counters": dict(self.counters),
        }
