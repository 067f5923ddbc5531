"""The datagram generator of `splitlab fuzz`: pure, seeded, no IO. One `random.Random(seed)` drives every choice,
so a seed, a count and a `Context` give the same datagrams again (and the first k of N are those of k).

Messages are described by the codec's own registry (`node.wire.message_types()`) and layouts
(`node.wire.body_layout`: a fixed message's `FORMAT` with its field names, a variable one's declared `LAYOUT`),
which the unit tests hold to node.wire's decoding. The bytes themselves are built here, not by node.wire's
encoder, so lengths and counts can be wrong on purpose.

Each `Case` is one datagram with one mutation class:

    valid         a well-formed message with plausible values (from the target's windows)
    boundary      one field (every field of every type, in turn) at a boundary of its width: 0, 1, max-1, max,
                  the sign bit; a flag byte of 2 or 255; names empty, too long, not utf-8, not members; payloads
                  and seqno lists empty and as large as a datagram allows
    window_edge   a seqno-like field at the target's window edges plus and minus one (`Context`, read from
                  /state: the unicast and multicast windows the target holds for the claimed sender, the view)
    conn_id       a conn_id field set to another connection's id (another peer's, one off, 0, the maximum)
    unknown_type  a message whose type code is not registered
    truncated     the datagram cut short, or one message body cut (with a body_len that matches the cut)
    oversized     bytes beyond a body, a body_len past the datagram's end, trailing bytes, or a well-formed
                  message as large as a datagram allows
    bad_count     a bundle whose message count is wrong (0, one off, above MAX_MESSAGES), or a names / seqnos /
                  payload count inside a body that is wrong
    header        bad magic, version, cluster id, sender length, a sender name that is not utf-8 or not a member,
                  another member's name, and incarnation boundaries (1, the member's boot plus and minus one, max)
    bundle        several well-formed messages in one datagram, up to MAX_MESSAGES tiny ones

`Case.well_formed` says whether node.wire must decode the datagram (True) or reject it with `WireError` (False).
A datagram claims a member as its sender (its IP source is that member's data address); a share of them leave
from another member's namespace (a spoofed source).
"""
from __future__ import annotations

import random
import struct
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

from node import wire

MUTATIONS = ("valid", "boundary", "window_edge", "conn_id", "unknown_type", "truncated", "oversized", "bad_count",
             "header", "bundle")
# How many of every 20 consecutive cases each class gets (a shuffled deck: every class appears in every 20).
MUTATION_WEIGHTS = {"valid": 3, "boundary": 3, "window_edge": 3, "conn_id": 2, "unknown_type": 1, "truncated": 2,
                    "oversized": 1, "bad_count": 2, "header": 2, "bundle": 1}
# the classes whose every datagram the codec rejects: no protocol sees them (the others forge messages it takes)
MALFORMED = frozenset({"unknown_type", "truncated", "bad_count"})
SPOOF_PCT = 30           # default share of datagrams sent from another member's namespace
SEQNO_FIELDS = frozenset({"seqno", "low", "next_seqno", "low_seqno", "n", "seqnos"})
_UINT_KINDS = {"u8": 1, "u16": 2, "u32": 4, "u64": 8}
MAX_UDP_PAYLOAD_BYTES = wire.MAX_DATAGRAM_BYTES
_HEAD = struct.Struct("!2sBIQB")  # magic, version, cluster_id, incarnation, sender_len (node/wire.py's header)


@dataclass(frozen=True)
class Field:
    """One wire field: `uint` (`width` bytes), `flag` (a byte that must be 0 or 1), `names` (a u8 count, then per
    name a u8 length and utf-8 bytes; `fixed` names expected by the codec, None: any), `payload` (a u32 length,
    then bytes) or `seqnos` (a u16 count, then u64 each)."""

    name: str
    kind: str
    width: int = 1
    fixed: int | None = None


def _u(name: str, width: int) -> Field:
    return Field(name, "uint", width)


# Whose window a message's numbers refer to, seen from the target: the claimed sender's unicast stream to the
# target (ucast_rx), the target's stream to the sender (ucast_tx), the same for multicast, or the view.
ROLES = {"UnicastData": "ucast_rx", "UnicastSyncOk": "ucast_rx", "UnicastClose": "ucast_rx",
         "UnicastAck": "ucast_tx", "UnicastStable": "ucast_tx", "UnicastXmitReq": "ucast_tx",
         "SendFirstSeqno": "ucast_tx", "UnicastSync": "ucast_tx", "UnicastSyncAck": "ucast_tx",
         "Nakack4Msg": "mcast_rx", "Nakack4XmitRsp": "mcast_rx", "Nakack4Highest": "mcast_rx",
         "BcastState": "mcast_rx", "Nakack4Ack": "mcast_tx", "Nakack4XmitReq": "mcast_tx",
         "BcastStateReq": "mcast_tx", "ViewMsg": "view", "ViewAck": "view", "ViewInfo": "view"}


def layout_of(cls: type[wire.Message]) -> tuple[Field, ...]:
    """The wire layout of a message class, from the codec's own (`node.wire.body_layout`); a name list that fills
    several fields is one `names` field named after them (`coord_acting`)."""
    out = []
    for kind, name in wire.body_layout(cls):
        if kind in _UINT_KINDS:
            out.append(_u(name, _UINT_KINDS[kind]))
        elif kind == "bool":
            out.append(Field(name, "flag"))
        elif kind == "payload":
            out.append(Field(name, "payload", 4))
        elif kind == "seqnos":
            out.append(Field(name, "seqnos", 2))
        elif kind == "name_list":
            out.append(Field(name.replace(" ", "_"), "names", 1, len(name.split())))
        else:  # names
            out.append(Field(name, "names", 1))
    return tuple(out)


def layouts() -> dict[int, tuple[Field, ...]]:
    """Every registered type code with its layout."""
    return {code: layout_of(cls) for code, cls in sorted(wire.message_types().items())}


# --- the target's windows (parsed from its /state) ---------------------------------------------------------------
@dataclass(frozen=True)
class PeerWindows:
    """What a target holds about one peer: its unicast receive entry (the peer's stream to it) and send entry,
    its multicast receive window for the peer, and the peer's ack of its multicasts (None: no entry)."""

    ucast_rx_conn: int | None = None
    ucast_rx_low: int | None = None
    ucast_rx_high: int | None = None
    ucast_tx_conn: int | None = None
    ucast_tx_low: int | None = None
    ucast_tx_high: int | None = None
    mcast_rx_low: int | None = None
    mcast_rx_high: int | None = None
    mcast_ack: int | None = None


@dataclass(frozen=True)
class TargetView:
    """One target as its /state showed it: name, boot (its incarnation), view and windows."""

    name: str
    boot: int = 0
    view_coord: str | None = None
    view_n: int = 0
    ucast_capacity: int = 0
    mcast_capacity: int = 0
    mcast_tx_low: int | None = None
    mcast_tx_high: int | None = None
    peers: dict[str, PeerWindows] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    """Everything the generator knows about the cluster: run, members (in order), targets and their windows."""

    run_id: str
    members: tuple[str, ...]
    targets: tuple[TargetView, ...]
    boots: dict[str, int] = field(default_factory=dict)

    @property
    def cluster_id(self) -> int:
        return wire.cluster_id_of(self.run_id)

    def target(self, name: str) -> TargetView:
        for view in self.targets:
            if view.name == name:
                return view
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Context":
        targets = tuple(TargetView(**{**t, "peers": {p: PeerWindows(**w) for p, w in t["peers"].items()}})
                        for t in data["targets"])
        return cls(data["run_id"], tuple(data["members"]), targets, dict(data.get("boots", {})))


def target_view(state: dict[str, Any]) -> TargetView:
    """A `TargetView` from a node's /state document (layers it does not run are left empty)."""
    layers = state.get("layers", {})
    unicast = layers.get("unicast") or {}
    multicast = layers.get("multicast") or {}
    peers: dict[str, dict[str, int | None]] = {}
    for peer, entry in (unicast.get("peers") or {}).items():
        rec = peers.setdefault(peer, {})
        if entry.get("recv"):
            rec.update(ucast_rx_conn=entry["recv"]["conn_id"], ucast_rx_low=entry["recv"]["highest_delivered"],
                       ucast_rx_high=entry["recv"]["highest_received"])
        if entry.get("send"):
            rec.update(ucast_tx_conn=entry["send"]["conn_id"], ucast_tx_low=entry["send"]["low"],
                       ucast_tx_high=entry["send"]["highest_sent"])
    for peer, window in (multicast.get("windows") or {}).items():
        peers.setdefault(peer, {}).update(mcast_rx_low=window["low"], mcast_rx_high=window["highest_received"])
    send = multicast.get("send") or {}
    for peer, ack in (send.get("acks") or {}).items():
        peers.setdefault(peer, {})["mcast_ack"] = ack
    view = state.get("view") or {}
    view_id = view.get("view_id") or [None, 0]
    return TargetView(name=state["node"], boot=int(state.get("boot") or 0), view_coord=view_id[0],
                      view_n=int(view_id[1] or 0),
                      ucast_capacity=int((unicast.get("config") or {}).get("window_capacity") or 0),
                      mcast_capacity=int((multicast.get("config") or {}).get("capacity") or 0),
                      mcast_tx_low=send.get("low"), mcast_tx_high=send.get("highest_sent"),
                      peers={p: PeerWindows(**w) for p, w in sorted(peers.items())})


# --- cases ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One generated datagram, aimed at `target`, with `src`'s data address as its IP source, sent from `via`'s
    namespace (`via` != `src`: a spoofed source)."""

    index: int
    target: str
    src: str
    via: str
    mutation: str
    types: tuple[str, ...]  # the distinct message types inside, in order
    detail: str
    well_formed: bool
    data: bytes

    def as_record(self) -> dict[str, Any]:
        return {"i": self.index, "target": self.target, "src": self.src, "via": self.via,
                "mutation": self.mutation, "types": list(self.types), "detail": self.detail,
                "well_formed": self.well_formed, "hex": self.data.hex()}

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> "Case":
        return cls(rec["i"], rec["target"], rec["src"], rec["via"], rec["mutation"], tuple(rec["types"]),
                   rec["detail"], rec["well_formed"], bytes.fromhex(rec["hex"]))


@dataclass
class _Msg:
    """A message under construction: values per field, and the lies to tell about it."""

    code: int
    values: dict[str, Any]
    lies: dict[str, int] = field(default_factory=dict)   # field -> declared count/length instead of the real one
    cut: int = 0                                         # bytes removed from the end of the body
    extra: bytes = b""                                   # bytes appended to the body
    body_len: int | None = None                          # declared body length instead of the real one


def _max(width: int) -> int:
    return (1 << (8 * width)) - 1


def _encode_field(f: Field, value: Any, lie: int | None) -> bytes:
    if f.kind == "uint":
        return value.to_bytes(f.width, "big")
    if f.kind == "flag":
        return bytes([value])
    if f.kind == "names":
        out = [bytes([len(value) if lie is None else lie])]
        for raw in value:
            out += [bytes([len(raw) & 0xFF]), raw]
        return b"".join(out)
    if f.kind == "payload":
        return (len(value) if lie is None else lie).to_bytes(4, "big") + value
    if f.kind == "seqnos":
        return (len(value) if lie is None else lie).to_bytes(2, "big") + b"".join(s.to_bytes(8, "big")
                                                                                  for s in value)
    raise ValueError(f"unknown field kind {f.kind}")


def encode_body(layout: tuple[Field, ...], msg: _Msg) -> bytes:
    body = b"".join(_encode_field(f, msg.values[f.name], msg.lies.get(f.name)) for f in layout)
    return (body[:len(body) - msg.cut] if msg.cut else body) + msg.extra


def _encode_msg(layout: tuple[Field, ...] | None, msg: _Msg) -> bytes:
    body = msg.values["raw"] if layout is None else encode_body(layout, msg)
    declared = len(body) if msg.body_len is None else msg.body_len
    return struct.pack("!BH", msg.code, declared) + body


def _datagram(cluster_id: int, sender: bytes, messages: list[bytes], *, incarnation: int = 0, magic: bytes = wire.MAGIC,
              version: int = wire.VERSION, sender_len: int | None = None, count: int | None = None,
              trailing: bytes = b"") -> bytes:
    head = _HEAD.pack(magic, version, cluster_id, incarnation, len(sender) if sender_len is None else sender_len)
    n = len(messages) if count is None else count
    return head + sender + struct.pack("!H", n) + b"".join(messages) + trailing


class _Deck:
    """Items dealt in shuffled passes: every item comes once per pass (coverage with randomness)."""

    def __init__(self, rng: random.Random, items: list[Any]) -> None:
        self.rng = rng
        self.items = list(items)
        self.pending: list[Any] = []

    def deal(self) -> Any:
        if not self.pending:
            self.pending = list(self.items)
            self.rng.shuffle(self.pending)
        return self.pending.pop()


class Generator:
    """Cases for `context` from `seed`; `cases(count)` yields them in order (pure: no IO, no clock)."""

    def __init__(self, seed: int, context: Context, targets: list[str] | None = None,
                 mutations: tuple[str, ...] = MUTATIONS, spoof_pct: float = SPOOF_PCT) -> None:
        unknown = set(mutations) - set(MUTATIONS)
        if unknown or not mutations:
            raise ValueError(f"mutation classes must be among {', '.join(MUTATIONS)}, got {sorted(mutations)}")
        self.seed = seed
        self.ctx = context
        self.rng = rng = random.Random(seed)
        self.targets = list(targets or [t.name for t in context.targets])
        self.spoof_pct = spoof_pct
        self.types = wire.message_types()
        self.layouts = layouts()
        codes = sorted(self.layouts)
        self.names = {code: self.types[code].__name__ for code in codes}
        self.mutations = _Deck(rng, [m for m in MUTATIONS if m in mutations for _ in range(MUTATION_WEIGHTS[m])])
        self.decks = {m: _Deck(rng, codes) for m in ("valid", "truncated", "oversized", "bad_count", "header",
                                                     "bundle")}
        self.fields = _Deck(rng, [(c, f) for c in codes for f in self.layouts[c]])
        self.seqno_fields = _Deck(rng, [(c, f) for c in codes for f in self.layouts[c] if f.name in SEQNO_FIELDS])
        self.conn_types = _Deck(rng, [c for c in codes if any(f.name == "conn_id" for f in self.layouts[c])])
        self.unknown_codes = _Deck(rng, [c for c in range(256) if c not in self.types])
        self.inner_count_types = [c for c in codes if any(f.kind in ("names", "seqnos", "payload")
                                                         for f in self.layouts[c])]

    # --- values ----------------------------------------------------------------------------------------------
    def _windows(self, target: str, sender: str) -> tuple[TargetView, PeerWindows]:
        view = self.ctx.target(target)
        return view, view.peers.get(sender, PeerWindows())

    def _numbers(self, code: int, target: str, sender: str) -> list[int]:
        """The window numbers of the target that a message of type `code` from `sender` refers to."""
        view, peer = self._windows(target, sender)
        role = ROLES.get(self.names[code], "any")
        picks = {"ucast_rx": [peer.ucast_rx_low, peer.ucast_rx_high],
                 "ucast_tx": [peer.ucast_tx_low, peer.ucast_tx_high],
                 "mcast_rx": [peer.mcast_rx_low, peer.mcast_rx_high],
                 "mcast_tx": [view.mcast_tx_low, view.mcast_tx_high, peer.mcast_ack],
                 "view": [view.view_n]}
        nums = picks.get(role) or [v for vs in picks.values() for v in vs]
        nums = [n for n in nums if n is not None] or [0]
        capacity = {"ucast_rx": view.ucast_capacity, "ucast_tx": view.ucast_capacity,
                    "mcast_rx": view.mcast_capacity, "mcast_tx": view.mcast_capacity}.get(role, 0)
        if capacity:
            nums.append(min(nums) + capacity)
        return nums

    def edges(self, code: int, width: int, target: str, sender: str) -> list[int]:
        """The window edges plus and minus one, within the field's width."""
        out = set()
        for n in self._numbers(code, target, sender):
            out.update(v for v in (n - 1, n, n + 1) if 0 <= v <= _max(width))
        return sorted(out)

    def conn_ids(self, target: str, sender: str) -> list[int]:
        """Connection ids worth trying: every id the context knows, one off each, 0 and the maximum."""
        ids = {0, 1, _max(4)}
        for view in self.ctx.targets:
            for peer in view.peers.values():
                for cid in (peer.ucast_rx_conn, peer.ucast_tx_conn):
                    if cid is not None:
                        ids.update(c for c in (cid - 1, cid, cid + 1) if 0 <= c <= _max(4))
        return sorted(ids)

    def _conn(self, code: int, target: str, sender: str) -> int:
        _, peer = self._windows(target, sender)
        role = ROLES.get(self.names[code])
        cid = peer.ucast_rx_conn if role == "ucast_rx" else peer.ucast_tx_conn
        return 0 if cid is None else cid

    def _payload(self, index: int, size: int | None = None) -> bytes:
        rng = self.rng
        head = f"fuzz.{self.seed}.{index}".encode() + b"\0"
        size = rng.choice((0, 1, 8, 32, 100, 300)) if size is None else size
        return (head + rng.randbytes(max(0, size - len(head))))[:max(size, len(head))] if size else b""

    def _valid_value(self, code: int, f: Field, target: str, sender: str, index: int) -> Any:
        rng = self.rng
        if f.kind == "flag":
            return rng.randint(0, 1)
        if f.kind == "payload":
            return self._payload(index)
        if f.kind == "seqnos":
            base = rng.choice(self._numbers(code, target, sender))
            return [min(_max(8), base + k) for k in range(rng.randint(0, 4))]
        if f.kind == "names":
            members = [m.encode() for m in self.ctx.members]
            view = self.ctx.target(target)
            if f.fixed == 1:
                return [target.encode()] if f.name == "sender" else [(view.view_coord or self.ctx.members[0]).encode()]
            if f.fixed is not None:
                return [rng.choice(members) for _ in range(f.fixed)]
            return members
        if f.name == "conn_id":
            return self._conn(code, target, sender)
        if f.name in SEQNO_FIELDS:
            return min(_max(f.width), rng.choice(self._numbers(code, target, sender)) + rng.randint(0, 3))
        if f.name == "flags":
            return rng.choice((0, wire.SYNC_CAPABLE))
        return rng.randrange(min(_max(f.width), 1 << 20) + 1)

    def _valid(self, code: int, target: str, sender: str, index: int) -> _Msg:
        return _Msg(code, {f.name: self._valid_value(code, f, target, sender, index) for f in self.layouts[code]})

    def _encode(self, msg: _Msg) -> bytes:
        return _encode_msg(self.layouts.get(msg.code), msg)

    # --- one case ----------------------------------------------------------------------------------------------
    def cases(self, count: int) -> Iterator[Case]:
        for index in range(count):
            yield self.case(index)

    def case(self, index: int) -> Case:
        rng = self.rng
        target = rng.choice(self.targets)
        others = [m for m in self.ctx.members if m != target] or [target]
        src = rng.choice(others)
        via = src
        if len(others) > 1 and rng.random() * 100 < self.spoof_pct:
            via = rng.choice([m for m in others if m != src])
        mutation = self.mutations.deal()
        built = getattr(self, f"_m_{mutation}")(target, src, index)
        messages, detail, well_formed = built[:3]
        head = dict(built[3]) if len(built) > 3 else {}
        sender = head.pop("sender", src.encode())
        cut_to = head.pop("cut_to", None)
        cluster_id = head.pop("cluster_id", self.ctx.cluster_id)
        encoded = [self._encode(m) if isinstance(m, _Msg) else m for m in messages]
        data = _datagram(cluster_id, sender, encoded, **head)
        if cut_to is not None:
            data = data[:cut_to]
        codes = dict.fromkeys(raw[0] for raw in encoded)  # distinct, in order
        types = tuple(self.types[c].__name__ if c in self.types else f"type{c}" for c in codes)
        if len(data) > MAX_UDP_PAYLOAD_BYTES:  # never built: sizes below keep to the limit
            raise AssertionError(f"case {index} is {len(data)} bytes")
        return Case(index, target, src, via, mutation, types, detail, well_formed, data)

    # Each mutation returns (messages, detail, well_formed[, header overrides]).
    def _m_valid(self, target: str, src: str, index: int):
        code = self.decks["valid"].deal()
        return [self._valid(code, target, src, index)], f"{self.names[code]} with plausible values", True

    def _m_boundary(self, target: str, src: str, index: int):
        rng = self.rng
        code, f = self.fields.deal()
        msg = self._valid(code, target, src, index)
        name = f"{self.names[code]}.{f.name}"
        if f.kind == "uint":
            top = _max(f.width)
            value, label = rng.choice([(0, "0"), (1, "1"), (top - 1, "max-1"), (top, "max"),
                                       (1 << (8 * f.width - 1), "sign bit")])
            msg.values[f.name] = value
            return [msg], f"{name}={value} ({label} of u{8 * f.width})", True
        if f.kind == "flag":
            value = rng.choice((2, 0x7F, 0xFF))
            msg.values[f.name] = value
            return [msg], f"{name}={value} (a flag byte must be 0 or 1)", False
        if f.kind == "payload":
            size = rng.choice((0, self._room(msg)))
            msg.values[f.name] = self._payload(index, size)
            return [msg], f"{name} of {size} bytes", True
        if f.kind == "seqnos":
            choice = rng.randrange(3)
            if choice == 0:
                msg.values[f.name] = []
                return [msg], f"{name} empty", True
            if choice == 1:
                msg.values[f.name] = [0, 1, _max(8) - 1, _max(8)]
                return [msg], f"{name}=[0, 1, max-1, max]", True
            msg.values[f.name] = []
            room = self._room(msg) // 8
            start = rng.choice(self._numbers(code, target, src))
            msg.values[f.name] = [min(_max(8), start + k) for k in range(room)]
            return [msg], f"{name}: {room} seqnos from {start} (as many as a datagram holds)", True
        return self._names_boundary(msg, f, name)

    def _names_boundary(self, msg: _Msg, f: Field, name: str):
        rng = self.rng
        choice = rng.randrange(6)
        if choice == 0:
            msg.values[f.name] = []
            return [msg], f"{name}: no names", f.fixed is None
        if choice == 1:
            count = f.fixed or 255
            msg.values[f.name] = [(f"m{i}-" + "x" * 64).encode()[:wire.MAX_SENDER_BYTES] for i in range(count)]
            return [msg], f"{name}: {count} names of {wire.MAX_SENDER_BYTES} bytes", True
        if choice == 2:
            msg.values[f.name] = [b"y" * (wire.MAX_SENDER_BYTES + 1)] * (f.fixed or 1)
            return [msg], f"{name}: a name of {wire.MAX_SENDER_BYTES + 1} bytes", False
        if choice == 3:
            msg.values[f.name] = [b""] * (f.fixed or 1)
            return [msg], f"{name}: an empty name", False
        if choice == 4:
            msg.values[f.name] = [b"\xff\xfe"] * (f.fixed or 1)
            return [msg], f"{name}: a name that is not utf-8", False
        msg.values[f.name] = [b"n999"] * (f.fixed or 1)
        return [msg], f"{name}: 'n999', not a member", True

    def _room(self, msg: _Msg) -> int:
        """Bytes left for the items of a variable field of `msg` (left empty now) in a one-message datagram:
        within the UDP payload limit (with the longest sender name) and the u16 body length."""
        body = len(encode_body(self.layouts[msg.code], msg))
        in_datagram = MAX_UDP_PAYLOAD_BYTES - (_HEAD.size + wire.MAX_SENDER_BYTES + 2 + 3)
        return min(in_datagram, 0xFFFF) - body

    def _m_window_edge(self, target: str, src: str, index: int):
        code, f = self.seqno_fields.deal()
        msg = self._valid(code, target, src, index)
        edges = self.edges(code, 8 if f.kind == "seqnos" else f.width, target, src)
        if f.kind == "seqnos":
            msg.values[f.name] = edges
            return [msg], f"{self.names[code]}.{f.name}={edges} (window edges +-1)", True
        value = self.rng.choice(edges)
        msg.values[f.name] = value
        return [msg], f"{self.names[code]}.{f.name}={value} (window edges {edges})", True

    def _m_conn_id(self, target: str, src: str, index: int):
        code = self.conn_types.deal()
        msg = self._valid(code, target, src, index)
        value = self.rng.choice(self.conn_ids(target, src))
        msg.values["conn_id"] = value
        return [msg], f"{self.names[code]}.conn_id={value} (own: {self._conn(code, target, src)})", True

    def _m_unknown_type(self, target: str, src: str, index: int):
        code = self.unknown_codes.deal()
        body = self.rng.randbytes(self.rng.choice((0, 1, 8, 32)))
        raw = struct.pack("!BH", code, len(body)) + body
        messages: list[Any] = [raw]
        if self.rng.random() < 0.5:  # behind a valid one: the whole datagram must go, not just the bad message
            messages.insert(0, self._valid(self.decks["valid"].deal(), target, src, index))
        return messages, f"type code {code} is not registered ({len(body)}-byte body)", False

    def _m_truncated(self, target: str, src: str, index: int):
        rng = self.rng
        code = self.decks["truncated"].deal()
        msg = self._valid(code, target, src, index)
        body_len = len(encode_body(self.layouts[code], msg))
        if body_len and rng.random() < 0.5:
            msg.cut = rng.randint(1, body_len)
            return [msg], f"{self.names[code]} body cut by {msg.cut} of {body_len} bytes (body_len agrees)", False
        whole = len(_datagram(0, src.encode(), [self._encode(msg)]))
        cut_to = rng.randrange(whole)
        return [msg], f"{self.names[code]} datagram cut to {cut_to} of {whole} bytes", False, {"cut_to": cut_to}

    def _m_oversized(self, target: str, src: str, index: int):
        rng = self.rng
        code = self.decks["oversized"].deal()
        msg = self._valid(code, target, src, index)
        name = self.names[code]
        choice = rng.randrange(4)
        if choice == 0:
            msg.extra = rng.randbytes(rng.choice((1, 7, 8, 100)))
            return [msg], f"{name} with {len(msg.extra)} bytes beyond its body (body_len covers them)", False
        if choice == 1:
            real = len(encode_body(self.layouts[code], msg))
            msg.body_len = rng.choice((real + 1, 0xFFFF))
            return [msg], f"{name} body_len {msg.body_len}, only {real} bytes follow", False
        if choice == 2:
            extra = rng.randbytes(rng.choice((1, 3, 64)))
            return [msg], f"{name} then {len(extra)} trailing bytes", False, {"trailing": extra}
        big = [f for f in self.layouts[code] if f.kind in ("payload", "seqnos", "names")]
        if not big:
            raw = self._encode(msg)
            return [raw] * min(wire.MAX_MESSAGES, 60000 // len(raw)), f"{name} repeated to fill a datagram", True
        f = rng.choice(big)
        msg.values[f.name] = [] if f.kind != "payload" else b""
        room = self._room(msg)
        if f.kind == "payload":
            msg.values[f.name] = self._payload(index, room)
        elif f.kind == "seqnos":
            msg.values[f.name] = [rng.randrange(1 << 64) for _ in range(room // 8)]
        else:
            count = f.fixed or 255
            msg.values[f.name] = [bytes([0x61 + k % 26]) * wire.MAX_SENDER_BYTES for k in range(count)]
            return [msg], f"{name}.{f.name}: {count} names of {wire.MAX_SENDER_BYTES} bytes", True
        return [msg], f"{name}.{f.name} as large as a datagram allows", True

    def _m_bad_count(self, target: str, src: str, index: int):
        rng = self.rng
        if rng.random() < 0.5 and self.inner_count_types:
            code = rng.choice(self.inner_count_types)
            msg = self._valid(code, target, src, index)
            f = rng.choice([f for f in self.layouts[code] if f.kind in ("names", "seqnos", "payload")])
            real = len(msg.values[f.name])
            top = {"names": 0xFF, "seqnos": 0xFFFF, "payload": _max(4)}[f.kind]
            lie = rng.choice([v for v in {real + 1, real - 1, 0, top} if 0 <= v <= top and v != real])
            msg.lies[f.name] = lie
            return [msg], f"{self.names[code]}.{f.name} count {lie}, {real} present", False
        n = rng.randint(1, 4)
        msgs = [self._valid(self.decks["bad_count"].deal(), target, src, index) for _ in range(n)]
        lies = [v for v in (0, n + 1, n + 7, wire.MAX_MESSAGES + 1, 0xFFFF) + ((n - 1,) if n > 1 else ())]
        count = rng.choice(lies)
        return msgs, f"bundle of {n} messages says count {count}", False, {"count": count}

    def _m_header(self, target: str, src: str, index: int):
        rng = self.rng
        code = self.decks["header"].deal()
        msg = self._valid(code, target, src, index)
        name = self.names[code]
        choice = rng.randrange(8)
        if choice == 0:
            magic = rng.choice((b"LS", b"\0\0", b"SM"))
            return [msg], f"{name} with magic {magic!r}", False, {"magic": magic}
        if choice == 1:
            version = rng.choice((0, wire.VERSION - 1, wire.VERSION + 1, 0xFF))
            return [msg], f"{name} with version {version}", False, {"version": version}
        if choice == 2:
            return [msg], f"{name} with a foreign cluster id", False, {"cluster_id": self.ctx.cluster_id ^ 0x5A5A}
        if choice == 3:
            sender_len = rng.choice((0, wire.MAX_SENDER_BYTES + 1, 0xFF))
            return [msg], f"{name} with sender_len {sender_len}", False, {"sender_len": sender_len}
        if choice == 4:
            return [msg], f"{name} from a sender name that is not utf-8", False, {"sender": b"\xc3\x28"}
        if choice == 5:
            sender = rng.choice((b"n999", b"x" * wire.MAX_SENDER_BYTES, "n\u00e9".encode()))
            return [msg], f"{name} from non-member {sender!r}", True, {"sender": sender}
        if choice == 6:
            other = rng.choice(self.ctx.members)
            return [msg], f"{name} claiming sender {other} (IP source {src})", True, {"sender": other.encode()}
        boot = self.ctx.boots.get(src, 0)
        value, label = rng.choice([(1, "1"), (max(1, boot - 1), "boot-1"), (boot, "boot"), (boot + 1, "boot+1"),
                                   (1 << 63, "2^63"), (_max(8), "max")])
        return [msg], f"{name} with incarnation {value} ({label} of {src})", True, {"incarnation": value}

    def _m_bundle(self, target: str, src: str, index: int):
        rng = self.rng
        if rng.random() < 0.2:
            tiny = [c for c in self.layouts if not self.layouts[c]]
            if tiny:
                code = rng.choice(tiny)
                return [self._encode(_Msg(code, {}))] * wire.MAX_MESSAGES, \
                    f"{wire.MAX_MESSAGES} x {self.names[code]} (the most a datagram may carry)", True
        n = rng.randint(2, 16)
        msgs = [self._valid(self.decks["bundle"].deal(), target, src, index) for _ in range(n)]
        return msgs, f"bundle of {n} well-formed messages", True


def generate(seed: int, count: int, context: Context, targets: list[str] | None = None,
             mutations: tuple[str, ...] = MUTATIONS, spoof_pct: float = SPOOF_PCT) -> Iterator[Case]:
    """The `count` cases of `seed` for `context` (see the module docstring)."""
    return Generator(seed, context, targets, mutations, spoof_pct).cases(count)
