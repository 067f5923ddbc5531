"""What the three unicast variants share: requests, the retransmit timer, membership, emits and `state()`.

A variant subclasses `UnicastBase` for ONE local member talking to many peers and implements the message
handlers (`_on_data`, `_on_ack`, ...), how a DATA header is built (`_make_data`), the retransmit task
(`_xmit_task`), its reaction to a view (`_view_changed`) and whether the task has work (`_needs_timer`).

The retransmit timer (`TIMER_KEY`) is armed only while there is work (unacked messages, gaps, owed acks,
handshakes, closing connections), so an idle member sets no timers and a simulation can run until quiet.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, ClassVar, Container, Hashable, Iterable

from mypy_extensions import mypyc_attr

from node.core import BatchingProtocol, Deliver, Effect, Emit, Send, SetTimer, payload_arg, payload_msg_id
from node.errors import UsageError, WindowFull
from node.unicast.config import UnicastConfig
from node.unicast.connid import first_conn_id, next_stream, stream_start
from node.unicast.entries import CLOSING, OPEN, ReceiveEntry, SendEntry
from node.unicast.window import NEW, ReceiveWindow, SendWindow
from node.wire import (HEAD_BYTES, MAX_DATAGRAM_BYTES, MAX_SENDER_BYTES, SendFirstSeqno, UnicastAck, UnicastClose,
                       UnicastData, UnicastStable, UnicastSync, UnicastSyncAck, UnicastSyncOk, UnicastXmitReq)

TIMER_KEY: tuple[str, str] = ("unicast", "xmit")
# datagram header with the longest sender name, one message head, the DATA fixed fields
MAX_PAYLOAD_BYTES = MAX_DATAGRAM_BYTES - (HEAD_BYTES + MAX_SENDER_BYTES + 2) - 3 - 17
XMIT_REQ_CHUNK = 4096  # seqnos per XMIT_REQ message
ALL_MESSAGES: tuple[type, ...] = (UnicastData, UnicastAck, UnicastStable, UnicastXmitReq, SendFirstSeqno,
                                  UnicastClose, UnicastSync, UnicastSyncOk, UnicastSyncAck)


def _peer_arg(args: dict[str, Any], name: str, local: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value:
        raise UsageError(f"unicast request: argument {name!r} must be a member name, got {value!r}")
    if value == local:
        raise UsageError(f"unicast request: {name}={value!r} is this member itself",
                         hint="unicast connections are to other members")
    return value


@mypyc_attr(allow_interpreted_subclasses=True)  # through Unicast3, which extension layers subclass
class UnicastBase(BatchingProtocol):
    """Reliable unicast from `local` to its peers; see the module docstring for what a variant provides."""

    NAME: ClassVar[str] = "unicast"
    MESSAGES: ClassVar[tuple[type, ...]] = ALL_MESSAGES  # the layer owns the whole unicast type range
    ADMIN_SYNC: ClassVar[bool] = False  # whether the `sync {peer}` request exists (scenarios check it up front)

    def __init__(self, local: str, config: UnicastConfig, members: Iterable[str] | None = None) -> None:
        self.local = local
        self.config = config
        self.xmit_s = config.xmit_interval_ms / 1000
        self.members: tuple[str, ...] | None = None
        self._member_set: frozenset[str] = frozenset()
        self.view_id: tuple[str, int] | None = None
        # the configured members (the initial membership): state is kept for them only, whatever views say later
        self._universe: frozenset[str] | None = None if members is None else frozenset(members)
        if members is not None:
            self._set_members(tuple(members))
        self.send_entries: dict[str, SendEntry] = {}
        self.recv_entries: dict[str, ReceiveEntry] = {}
        self.counters: Counter = Counter()
        self._stream = stream_start(config.conn_id_start)
        self._timer_at: float | None = None
        self._blocked: dict[str, SendEntry] = {}  # peer -> its send entry, while that window is full
        self._handlers: dict[type, Callable[[float, str, Any], list[Effect]]] = {
            UnicastData: self._on_data, UnicastAck: self._on_ack, UnicastStable: self._on_stable,
            UnicastXmitReq: self._on_xmit_req, SendFirstSeqno: self._on_send_first_seqno,
            UnicastClose: self._on_close, UnicastSync: self._on_sync, UnicastSyncOk: self._on_sync_ok,
            UnicastSyncAck: self._on_sync_ack,
        }

    # --- the sans-IO entry points -----------------------------------------------------------------------------
    def _after(self, now_s: float, effects: list[Effect]) -> list[Effect]:
        """What follows every event, or a datagram's messages (`node.core.BatchingProtocol`): windows that have
        room again are told, the retransmit timer is armed when work appeared."""
        if self._blocked:
            self._unblock(now_s, effects)
        if self._timer_at is None and self._needs_timer():
            self._timer_at = now_s + self.xmit_s
            effects.append(SetTimer(TIMER_KEY, self._timer_at))
        return effects

    def start(self, now_s: float) -> list[Effect]:
        """Nothing to start: the retransmit timer is armed when there is work."""
        return []

    def on_timer(self, now_s: float, key: Hashable) -> list[Effect]:
        if key != TIMER_KEY:
            return []
        self._timer_at = None
        return self._xmit_task(now_s)

    def on_received(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        if self._universe is not None and (src not in self._universe or src == self.local):
            self.counters["from_stranger" if src != self.local else "from_self"] += 1  # no state for them
            return []
        handler = self._handlers.get(type(msg))
        if handler is None:
            self.counters["ignored_messages"] += 1
            return []
        return handler(now_s, src, msg)

    def on_request(self, now_s: float, op: str, args: dict[str, Any]) -> list[Effect]:
        """Requests: send {to, payload}, close {peer}, remove {peer}, remove_receive {peer}, sync {peer} (unicast3).

        `remove` drops both entries to the peer at once (a unilateral close, as in the seeds' scenarios; JGroups'
        removeConnection). `close` is the variant's own close: the same in unicast1/unicast2 (UNICAST2 closes at
        once by design), CLOSING in unicast3 (JGroups' closeConnection: removed after conn_close_timeout unless
        traffic reopens it).

        Raises UsageError for an unknown op or bad arguments, WindowFull when the send window to `to` is full.
        """
        if op == "send":
            return self._send(now_s, _peer_arg(args, "to", self.local),
                              payload_arg(args, MAX_PAYLOAD_BYTES, "unicast send"))
        if op == "close":
            return self._close(now_s, _peer_arg(args, "peer", self.local))
        if op == "remove":
            return self._remove(now_s, _peer_arg(args, "peer", self.local))
        if op == "remove_receive":
            return self._remove_receive(now_s, _peer_arg(args, "peer", self.local), "removed")
        if op == "sync":
            return self._request_sync(now_s, _peer_arg(args, "peer", self.local))
        raise UsageError(f"{self.NAME}: unknown request {op!r}",
                         hint="requests: send {to, payload}, close {peer}, remove {peer}, remove_receive {peer}, "
                                  "sync {peer}")

    def on_send(self, now_s: float, to: str, payload: bytes) -> list[Effect]:
        return self._send(now_s, to, payload)

    def on_view(self, now_s: float, view_id: tuple[str, int], members: tuple[str, ...]) -> list[Effect]:
        self.view_id = view_id
        self._set_members(tuple(members))
        return self._view_changed(now_s)

    # --- state --------------------------------------------------------------------------------------------------
    def state(self, now_s: float | None = None) -> dict[str, Any]:
        """JSON-able state: per peer the send and receive entry (conn_id, low, highest seqnos, state, counters)."""
        peers = sorted(set(self.send_entries) | set(self.recv_entries))
        return {
            "proto": self.NAME, "local": self.local,
            "members": None if self.members is None else list(self.members),
            "view_id": None if self.view_id is None else list(self.view_id),
            "config": self.config.as_dict(),
            "peers": {p: {"send": self.send_entries[p].to_state() if p in self.send_entries else None,
                          "recv": self.recv_entries[p].to_state() if p in self.recv_entries else None}
                      for p in peers},
            "counters": dict(self.counters),
        }

    # --- shared helpers --------------------------------------------------------------------------------------
    def _set_members(self, members: tuple[str, ...]) -> None:
        self.members = members
        self._member_set = frozenset(members)

    def is_member(self, peer: str) -> bool:
        """Whether `peer` is in the current membership (everyone is while no membership is known)."""
        return self.members is None or peer in self._member_set

    def _new_conn_id(self) -> int:
        """The id of a new send connection: the first id of the next stream."""
        conn_id = first_conn_id(self._stream)
        self._stream = next_stream(self._stream)
        return conn_id

    def _conn_state(self, peer: str, direction: str, state: str, conn_id: int, **extra: Any) -> Emit:
        return Emit("conn_state", {"proto": self.NAME, "peer": peer, "dir": direction, "state": state,
                                   "conn_id": conn_id, **extra})

    def _new_send_entry(self, now_s: float, peer: str, out: list[Effect]) -> SendEntry:
        entry = SendEntry(conn_id=self._new_conn_id(), created_s=now_s,
                          window=SendWindow(self.config.window_capacity))
        self.send_entries[peer] = entry
        out.append(self._conn_state(peer, "send", OPEN, entry.conn_id))
        return entry

    def _new_recv_entry(self, now_s: float, peer: str, conn_id: int, highest_delivered: int,
                        out: list[Effect]) -> ReceiveEntry:
        entry = ReceiveEntry(conn_id=conn_id, window=ReceiveWindow(self.config.window_capacity, highest_delivered),
                             active_s=now_s)
        self.recv_entries[peer] = entry
        out.append(self._conn_state(peer, "recv", OPEN, conn_id))
        return entry

    def _send(self, now_s: float, to: str, payload: bytes) -> list[Effect]:
        out: list[Effect] = []
        entry = self.send_entries.get(to)
        if entry is None:
            entry = self._new_send_entry(now_s, to, out)
        elif entry.state == CLOSING:
            self._reopen_send(to, entry, out)
        w = entry.window
        if not w.has_room():
            entry.counters["refused"] += 1
            raise WindowFull(self.NAME, w.highest_sent + 1, w.low, w.capacity, to)
        entry.active_s = now_s
        if not w.msgs:
            entry.last_ack_s = now_s  # retransmission time counts from the oldest unacked message
        seqno = w.append(payload)
        self._data(to, entry, seqno, payload, False, None, out)
        if not w.has_room():  # this send filled the window: the next one waits for acks
            entry.blocked_since_s = now_s
            entry.counters["blocked"] += 1
            self._blocked[to] = entry
            out.append(Emit("window_full", {"proto": self.NAME, "peer": to, "seqno": seqno, "low": w.low,
                                            "capacity": w.capacity}))
        return out

    def _unblock(self, now_s: float, out: list[Effect]) -> None:
        """Emit `window_unblocked` for every full send window that has room again (or whose connection went)."""
        for peer, entry in list(self._blocked.items()):
            gone = self.send_entries.get(peer) is not entry
            if gone or entry.window.has_room():
                del self._blocked[peer]
                since_s = now_s if entry.blocked_since_s is None else entry.blocked_since_s  # set while blocked
                blocked_ms = round((now_s - since_s) * 1000, 3)
                entry.blocked_since_s = None
                out.append(Emit("window_unblocked", {"proto": self.NAME, "peer": peer, "blocked_ms": blocked_ms,
                                                     "low": entry.window.low, "closed": gone}))

    def _data(self, peer: str, entry: SendEntry, seqno: int, payload: bytes, resend: bool, first: bool | None,
              out: list[Effect]) -> None:
        """Append the Send of one DATA (and its `data_tx` event) to `out`."""
        msg = self._make_data(entry, seqno, payload, first)
        entry.counters["resent" if resend else "sent"] += 1
        out.append(Send(peer, msg))
        fields = {"proto": self.NAME, "to": peer, "seqno": seqno, "conn_id": msg.conn_id, "first": msg.first,
                  "resend": resend, "size": len(payload)}
        if not resend:  # the first transmission names the message: the analysis follows it to the receiver
            fields["msg_id"] = payload_msg_id(payload)
        out.append(Emit("data_tx", fields))

    def _data_rx(self, src: str, msg: UnicastData, action: str) -> Emit:
        return Emit("data_rx", {"proto": self.NAME, "from": src, "seqno": msg.seqno, "conn_id": msg.conn_id,
                                "first": msg.first, "action": action})

    def _deliver_new(self, src: str, entry: ReceiveEntry, msg: UnicastData, out: list[Effect]) -> tuple[str, int]:
        """Add `msg` to the window and deliver what became deliverable. Returns (window result, delivered)."""
        result, ready = entry.window.take(msg.seqno, msg.payload)
        if result != NEW:
            entry.counters[result] += 1
            out.append(self._data_rx(src, msg, result))
            return result, 0
        entry.counters["received"] += 1
        out.append(self._data_rx(src, msg, "deliver" if ready else "buffer"))
        for _seqno, payload in ready:
            out.append(Deliver(src, payload))
        entry.counters["delivered"] += len(ready)
        return result, len(ready)

    def _reopen_send(self, peer: str, entry: SendEntry, out: list[Effect]) -> None:
        entry.state = OPEN
        entry.closing_since_s = None
        out.append(self._conn_state(peer, "send", OPEN, entry.conn_id))

    def _reopen_recv(self, peer: str, entry: ReceiveEntry, out: list[Effect]) -> None:
        entry.state = OPEN
        entry.closing_since_s = None
        out.append(self._conn_state(peer, "recv", OPEN, entry.conn_id))

    def _xmit_requests(self, peer: str, entry: ReceiveEntry, conn_id: int, out: list[Effect]) -> None:
        """Ask for the gaps that were already there at the previous run (a gap may just be reordering)."""
        w = entry.window
        if not w.has_gaps():
            entry.prev_highest_missing = None
            return
        missing = w.missing(self.config.max_xmit_req_seqnos)
        if not missing:
            entry.prev_highest_missing = None
            return
        prev = entry.prev_highest_missing
        highest = missing[-1]
        if prev is None or highest > prev:
            entry.prev_highest_missing = highest
        if prev is None:
            return
        ask = missing if highest <= prev else [s for s in missing if s <= prev]
        for start in range(0, len(ask), XMIT_REQ_CHUNK):
            chunk = tuple(ask[start:start + XMIT_REQ_CHUNK])
            entry.counters["xmit_reqs"] += 1
            out.append(Send(peer, UnicastXmitReq(conn_id, chunk)))
            out.append(Emit("xmit_req_tx", {"proto": self.NAME, "to": peer, "seqnos": list(chunk)}))

    def _serve_xmit(self, src: str, entry: SendEntry | None, seqnos: Iterable[int], out: list[Effect],
                    repeats: Container[int] = ()) -> None:
        """Resend what is still held of `seqnos` but the `repeats` (a variant's: resent in answer to a request a
        moment ago); the event names what was found, what is gone and the repeats."""
        found: list[int] = []
        missing: list[int] = []
        repeated: list[int] = []
        for seqno in seqnos:
            if seqno in repeats:
                repeated.append(seqno)
                continue
            payload = entry.window.get(seqno) if entry is not None else None
            if payload is None or entry is None:
                missing.append(seqno)
                continue
            found.append(seqno)
            if len(found) <= self.config.max_xmit_req_seqnos:
                self._data(src, entry, seqno, payload, True, None, out)
        if entry is not None:
            entry.counters["xmit_missing"] += len(missing)
        event: dict[str, Any] = {"proto": self.NAME, "from": src, "seqnos": list(seqnos), "found": found,
                                 "missing": missing}
        if repeated:
            event["repeats"] = repeated
        out.append(Emit("xmit_req_rx", event))

    def _tail_resend(self, peer: str, entry: SendEntry, out: list[Effect]) -> None:
        """Resend the highest unacked message when neither acks nor sends moved since the previous run."""
        w = entry.window
        if not w.msgs:
            entry.prev_tail = None
            return
        tail = (w.low, w.highest_sent)
        if entry.prev_tail == tail:
            seqno = next(reversed(w.msgs))
            self._data(peer, entry, seqno, w.msgs[seqno], True, None, out)
        entry.prev_tail = tail

    def _close(self, now_s: float, peer: str) -> list[Effect]:
        """The variant's close; here the legacy one: both entries go at once."""
        return self._remove(now_s, peer)

    def _remove(self, now_s: float, peer: str) -> list[Effect]:
        """Remove both entries to `peer` at once (a unilateral close: the peer is not told)."""
        out: list[Effect] = []
        entry = self.send_entries.pop(peer, None)
        if entry is not None:
            out.append(self._conn_state(peer, "send", "removed", entry.conn_id))
        out += self._remove_receive(now_s, peer, "removed")
        return out

    def _remove_receive(self, now_s: float, peer: str, state: str) -> list[Effect]:
        entry = self.recv_entries.pop(peer, None)
        if entry is None:
            return []
        return [self._conn_state(peer, "recv", state, entry.conn_id)]

    # --- what a variant provides ---------------------------------------------------------------------------
    def _make_data(self, entry: SendEntry, seqno: int, payload: bytes, first: bool | None) -> UnicastData:
        raise NotImplementedError

    def _xmit_task(self, now_s: float) -> list[Effect]:
        raise NotImplementedError

    def _needs_timer(self) -> bool:
        raise NotImplementedError

    def _view_changed(self, now_s: float) -> list[Effect]:
        return []

    def _request_sync(self, now_s: float, peer: str) -> list[Effect]:
        raise UsageError(f"{self.NAME} has no sync operation", hint="sync {peer} exists in unicast3 and its kin")

    def _ignore(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        self.counters[f"ignored_{type(msg).__name__}"] += 1
        return []

    # A variant's handlers; what it does not override is ignored (and counted). Methods, not `_on_data = _ignore`
    # aliases: mypyc compiles no assignment of several names in a class body.
    def _on_data(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        return self._ignore(now_s, src, msg)

    def _on_ack(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        return self._ignore(now_s, src, msg)

    def _on_stable(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        return self._ignore(now_s, src, msg)

    def _on_xmit_req(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        return self._ignore(now_s, src, msg)

    def _on_send_first_seqno(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        return self._ignore(now_s, src, msg)

    def _on_close(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        return self._ignore(now_s, src, msg)

    def _on_sync(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        return self._ignore(now_s, src, msg)

    def _on_sync_ok(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        return self._ignore(now_s, src, msg)

    def _on_sync_ack(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        return self._ignore(now_s, src, msg)
