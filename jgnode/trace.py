"""What the real JGroups stack does with each message, as splitlab history events (pure: no JVM here).

The trace protocol (`images/jgroups/java/splitlab/SplitlabTrace.java`) sits directly above UDP and shows every
message crossing it, serialised as JGroups writes it; `jgnode.wire` decodes it. An incoming message's
`arrived` .. `settled` bracket its synchronous pass up the stack on one thread, so what the layers above did
with it in between tells its fate:
- delivered to the application on this thread (`delivered`, from the channel's receiver): `deliver`;
- the unicast protocol asked its sender for the first seqno meanwhile (a SEND_FIRST_SEQNO left): `wrong_conn`
  when this node had delivered from another connection of that sender, else `no_conn`;
- at or below what was delivered from that sender's connection: `duplicate`;
- a message of the stack itself (no application message id: a view, a digest) next in order on its connection:
  `deliver` (the layer above takes it at once, as it would an application message);
- otherwise `buffer` (kept behind a gap, or handed to another thread that is delivering that sender's messages).
Resends answered within an XMIT_REQ's pass are its `found` seqnos, the rest of the range its `missing`. A data
message sent again on a connection (seqno at or below the highest sent) is a `resend`.

Events follow pipeline/SCHEMA.md with `proto` the real protocol's name (`UNICAST2`, `UNICAST`, `NAKACK`), so a
verdict never mixes the real code with splitlab's models. State kept per peer is bounded: the highest seqnos per
connection, and at most `MAX_PENDING` buffered messages awaiting delivery (the oldest forgotten first).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from jgnode import wire
from node.core import payload_msg_id
from node.errors import WireError

# The protocol events this trace writes (with the liveness' and the receiver's: `node_start.config.records`).
RECORDS = frozenset({"data_tx", "data_rx", "ack_tx", "ack_rx", "stable_tx", "stable_rx", "xmit_req_tx",
                     "xmit_req_rx", "resync_tx", "resync_rx", "suspect", "stranger_heard"})
MAX_PENDING = 100_000
MAX_RANGE = 1000
MAX_NAMES = 1024  # addresses remembered with their logical names (members, and a few strangers)  # seqnos listed for one XMIT_REQ range (a range beyond it is cut, its `high` kept)
Record = Callable[[str, dict[str, Any]], None]

PROTO = {"Unicast2": "UNICAST2", "Unicast": "UNICAST", "Nakack": "NAKACK"}  # type-name prefix -> protocol


def split_type(type_name: str) -> tuple[str | None, str]:
    """(protocol, message kind) of a `jgnode.wire` type name: `Unicast2XmitReq` -> (`UNICAST2`, `XmitReq`);
    (None, name) for a type of no reliability protocol."""
    for prefix, proto in PROTO.items():
        kind = type_name[len(prefix):]
        if type_name.startswith(prefix) and kind[:1].isupper():
            return proto, kind
    return None, type_name


@dataclass
class Arrival:
    """An incoming message between `arrived` and `settled`."""

    type_name: str
    src: str
    fields: dict[str, Any]
    msg_id: str | None
    delivered: set[str] = field(default_factory=set)  # msg ids delivered on this thread meanwhile
    departures: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (type, dest, fields)


class Trace:
    """Turns the trace protocol's calls and the channel's deliveries into history events through `record`;
    `heard(name)` is told of every message's sender (the node's liveness). A message from or to `local` itself
    never crosses the wire (the transport loops it back) and is left out. Thread-safe: JGroups calls it from its
    thread pools."""

    def __init__(self, local: str, record: Record, heard: Callable[[str], None]) -> None:
        self.local = local
        self._record = record
        self._heard = heard
        # the arrivals in their pass up, per OS thread: not threading.local, whose state JPype drops between two
        # calls from the same Java thread (each call attaches a fresh Python thread state)
        self._passes: dict[int, list[Arrival | None]] = {}
        self._lock = threading.Lock()
        self._sent: dict[tuple[str, str, int], int] = {}  # (proto, dest, conn_id) -> highest seqno sent
        self._delivered: dict[tuple[str, str], tuple[int, int]] = {}  # (proto, src) -> (conn_id, highest seqno)
        self._pending: OrderedDict[str, tuple[str, str, int, int]] = OrderedDict()  # msg id -> proto, src, conn, seqno
        self._names: dict[str, str] = {}  # a member's address as the codec prints it -> its logical name
        self.undecodable = 0

    # --- the trace protocol's calls -------------------------------------------------------------------------------
    def _stack(self) -> list[Arrival | None]:
        return self._passes.setdefault(threading.get_ident(), [])

    def arrived(self, data: bytes, src: str | None) -> None:
        stack = self._stack()
        try:
            msg = wire.decode_message(data)
        except WireError:
            self.undecodable += 1
            stack.append(None)
            return
        name = src or str(msg.src)  # a sender whose logical name discovery has not told yet: its UUID
        if name == self.local:
            stack.append(None)
            return
        if src is not None:
            self._heard(src)
            if msg.src is not None and len(self._names) < MAX_NAMES:
                self._names.setdefault(str(msg.src), src)
        type_name, fields = wire.classify(msg)
        stack.append(Arrival(type_name, name, fields, payload_msg_id(msg.payload) if msg.payload else None))

    def settled(self) -> None:
        ident = threading.get_ident()
        stack = self._passes[ident]
        arrival = stack.pop()
        if not stack:
            del self._passes[ident]
        if arrival is None:
            return
        proto, kind = split_type(arrival.type_name)
        if proto is None:
            return
        f = arrival.fields
        if kind in ("Data", "Msg", "XmitRsp"):  # an XMIT_RSP keeps its original sender as src
            self._data_rx(proto, arrival.src, arrival, resend=kind == "XmitRsp")
        elif kind == "XmitReq":
            asked = _seqnos(f)
            found = sorted({d[2].get("seqno") for d in arrival.departures if _is_data(d[0])} & set(asked))
            self._record("xmit_req_rx", {"proto": proto, "from": arrival.src, "seqnos": asked, "found": found,
                                         "missing": sorted(set(asked) - set(found))})
        elif kind == "SendFirstSeqno":
            self._record("resync_rx", {"proto": proto, "peer": arrival.src, "kind": "first_seqno_req",
                                       "bytes": 0, "low": f.get("seqno")})
        elif kind == "Stable":
            self._record("stable_rx", {"proto": proto, "from": arrival.src, "seqno": f.get("seqno"),
                                       "high": f.get("high"), "action": "accepted"})
        elif kind == "Ack":
            self._record("ack_rx", {"proto": proto, "from": arrival.src, "seqno": f.get("seqno"),
                                    "conn_id": f.get("conn_id"), "action": "accepted"})

    def departing(self, data: bytes, dest: str | None) -> None:
        try:
            msg = wire.decode_message(data)
        except WireError:
            self.undecodable += 1
            return
        type_name, fields = wire.classify(msg)
        proto, kind = split_type(type_name)
        if proto is None or dest == self.local:
            return
        to = dest or "*"
        stack = self._passes.get(threading.get_ident())
        if stack and stack[-1] is not None:
            stack[-1].departures.append((type_name, to, fields))
        seqno = fields.get("seqno")
        if kind in ("Data", "Msg", "XmitRsp"):
            conn_id = int(fields.get("conn_id") or 0)
            key = (proto, to, conn_id)
            with self._lock:
                resend = kind == "XmitRsp" or seqno <= self._sent.get(key, 0)
                if not resend:
                    self._sent[key] = seqno
            event = {"proto": proto, "to": to, "seqno": seqno, "conn_id": conn_id,
                     "first": bool(fields.get("first")), "resend": resend, "size": len(msg.payload or b"")}
            if not resend:
                msg_id = payload_msg_id(msg.payload) if msg.payload else None
                if msg_id is not None:
                    event["msg_id"] = msg_id
            self._record("data_tx", event)
        elif kind == "XmitReq":  # NAKACK names the original sender inside: its name, once a message told it
            sender = fields.get("sender")
            self._record("xmit_req_tx", {"proto": proto, "to": self._names.get(sender, sender) if sender else to,
                                         "seqnos": _seqnos(fields)})
        elif kind == "SendFirstSeqno":  # this node has no window for `to` (any more): what it delivered is gone
            if not stack:  # (within an arrival's pass, its settling forgets it, after telling wrong_conn)
                with self._lock:
                    self._delivered.pop((proto, to), None)
            self._record("resync_tx", {"proto": proto, "peer": to, "kind": "first_seqno_req", "bytes": len(data),
                                       "low": seqno})
        elif kind == "Stable":
            self._record("stable_tx", {"proto": proto, "to": to, "seqno": seqno, "high": fields.get("high")})
        elif kind == "Ack":
            self._record("ack_tx", {"proto": proto, "to": to, "seqno": seqno, "conn_id": fields.get("conn_id")})

    # --- the channel's receiver -----------------------------------------------------------------------------------
    def delivered(self, msg_id: str) -> None:
        """The application got `msg_id` (on the calling thread)."""
        stack = self._passes.get(threading.get_ident())
        if stack and stack[-1] is not None:
            stack[-1].delivered.add(msg_id)
        with self._lock:
            pending = self._pending.pop(msg_id, None)
            if pending is not None:
                proto, src, conn_id, seqno = pending
                self._advance(proto, src, conn_id, seqno)

    # --- helpers --------------------------------------------------------------------------------------------------
    def _advance(self, proto: str, src: str, conn_id: int, seqno: int) -> None:
        last = self._delivered.get((proto, src))
        if last is None or last[0] != conn_id or seqno > last[1]:
            self._delivered[(proto, src)] = (conn_id, seqno)

    def _data_rx(self, proto: str, src: str, arrival: Arrival, resend: bool) -> None:
        f = arrival.fields
        seqno, conn_id = f.get("seqno"), int(f.get("conn_id") or 0)
        with self._lock:
            last = self._delivered.get((proto, src))
            in_order = last is None or last[0] != conn_id or seqno == last[1] + 1
            if arrival.msg_id is not None and arrival.msg_id in arrival.delivered:
                action = "deliver"
                self._advance(proto, src, conn_id, seqno)
            elif any(d[0].endswith("SendFirstSeqno") for d in arrival.departures):
                action = "wrong_conn" if last is not None and last[0] != conn_id else "no_conn"
                self._delivered.pop((proto, src), None)  # the window is gone: a new one starts afresh
            elif last is not None and last[0] == conn_id and seqno <= last[1]:
                action = "duplicate"
            elif arrival.msg_id is None and in_order:  # the stack's own message (a view, a digest), in order:
                action = "deliver"                      # taken by the layer above at once, as an app message is
                self._advance(proto, src, conn_id, seqno)
            else:
                action = "buffer"
                if arrival.msg_id is not None:
                    self._pending[arrival.msg_id] = (proto, src, conn_id, seqno)
                    while len(self._pending) > MAX_PENDING:
                        self._pending.popitem(last=False)
        event = {"proto": proto, "from": src, "seqno": seqno, "conn_id": conn_id, "first": bool(f.get("first")),
                 "action": action}
        if proto == "NAKACK":
            event["resend"] = resend
        self._record("data_rx", event)


def _is_data(type_name: str) -> bool:
    return type_name.endswith(("Data", "Msg", "XmitRsp"))


def _seqnos(fields: dict[str, Any]) -> list[int]:
    low = int(fields.get("seqno") or 0)
    high = int(fields.get("high") if fields.get("high") is not None else low)
    return list(range(low, min(high, low + MAX_RANGE - 1) + 1))
