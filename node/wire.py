"""The node's wire format: one versioned, `struct`-based codec for every datagram and message.

A datagram is a header followed by one or more messages (bundling):

    header   magic b"SL" | version u8 | cluster_id u32 | incarnation u64 | sender_len u8 | sender (utf-8)
             | count u16

`incarnation` is the sender's boot (unix ms): a receiver that sees it grow knows the sender restarted (its
protocol state is new), and one that sees an older one drops the datagram as a leftover of the previous life.
0 means "not stated" (forged or replayed traffic of the chaos tools) and is taken as the current one.
    message  type u8 | body_len u16 | body (per type, below)

A signed datagram (the authenticated wire of `splitlab up --auth`) is the same bytes with `SIGNED` set in the
version byte and a tag after the last message:

    signed   header (version | SIGNED) | messages | tag (node.auth.TAG_BYTES: HMAC-SHA256 of every byte before it)

so a dissector without the key still reads it (it strips the tag), and one HMAC covers the whole datagram
whatever it bundles. `check_tag` is what a node with a key asks before any decode; `sign` makes a datagram
made elsewhere (forged, fuzzed) a signed one, `unsign` gives a signed datagram's open form (a capture replayed),
`reseal` signs again what the shaper rewrote. Every datagram keeps room for a tag (`MAX_DATAGRAM_BYTES` is
`MAX_UDP_BYTES` less it), so the payload limits are the same on both wires.

All integers are network byte order. A datagram with a foreign magic or cluster id, another version, a
truncated or absurd field, or an unknown message type raises `WireError` with a short `reason`; the receive
loop counts it by reason and drops it.

Type codes are allocated in ranges: 1-15 membership and liveness, 16-47 unicast, 48-79 multicast.
New messages are dataclasses that subclass `Message`, registered right after their class bodies by `register(cls,
TYPE, FORMAT, layout=...)` (FORMAT: a struct format of their fixed fields, network order), which sets the class
constants and compiles the `FORMAT` once (`_STRUCT`) and the getter of the fixed fields (`_VALUES`, field order):
encoding a fixed-size message is one `Struct.pack` of the fields (not `dataclasses.astuple`, which copies
recursively: ~10x slower), decoding one `Struct.unpack`. A message with a variable tail (a payload or a list)
overrides `encode_body` / `decode_body`, uses `_STRUCT` for its fixed head, and declares its whole body in `LAYOUT`
(`body_layout`). The layouts are what tools outside the codec read the wire by: the fuzz generator (chaos.fuzz.gen)
and the Wireshark dissector (chaos.wire.wireshark); the tests hold every layout to the codec's own decoding.
"""
from __future__ import annotations

import operator
import struct
import zlib
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar, Final, cast

from mypy_extensions import mypyc_attr

from node.auth import TAG_BYTES, WireKey
from node.errors import WireError

MAGIC = b"SL"
VERSION = 2
SIGNED = 0x80  # in the version byte: a tag follows the messages (the authenticated wire)
VERSION_OFFSET = 2  # where the version byte is, after the magic
MAX_UDP_BYTES = 65507  # the largest UDP payload over IPv4
MAX_DATAGRAM_BYTES = MAX_UDP_BYTES - TAG_BYTES  # a datagram before its tag: signed or not, it fits one UDP payload
MAX_MESSAGES = 4096
MAX_SENDER_BYTES = 64
DATA_PORT = 7100

_HEAD = struct.Struct("!2sBIQB")  # magic, version, cluster_id, incarnation, sender_len
HEAD_BYTES = _HEAD.size  # the fixed part of the header, before the sender's name
_COUNT = struct.Struct("!H")
_MSG_HEAD = struct.Struct("!BH")  # type, body_len
# The sizes the decoder adds up per message, as `Final` ints: mypyc keeps them native (a `Struct`'s `size` is an
# attribute lookup and a boxed int, per use)
_HEAD_SIZE: Final[int] = _HEAD.size
_COUNT_SIZE: Final[int] = _COUNT.size
_MSG_HEAD_SIZE: Final[int] = _MSG_HEAD.size

_REGISTRY: dict[int, type["Message"]] = {}
# type code -> its class's `decode_body`, bound once by `register` (not looked up and bound per message)
_DECODERS: dict[int, Callable[[bytes], "Message"]] = {}
Layout = tuple[tuple[str, str], ...]  # a message body as (kind, field) in order


def cluster_id_of(run_id: str) -> int:
    """The 32-bit cluster id carried by every datagram of a run (stray traffic from other runs is dropped)."""
    return zlib.crc32(run_id.encode()) & 0xFFFFFFFF


@mypyc_attr(allow_interpreted_subclasses=True)  # a new layer's own messages, outside the compiled build
class Message:
    """Base of all wire messages (subclasses are value dataclasses as in `node.core`, made decodable by `register`)."""

    __slots__ = ()

    TYPE: ClassVar[int]
    FORMAT: ClassVar[str] = ""
    LAYOUT: ClassVar[Layout] = ()  # the body as (kind, field), for dissectors: see below
    _STRUCT: ClassVar[struct.Struct] = struct.Struct("!")  # "!" + FORMAT, compiled by `register`
    _VALUES: ClassVar[Callable[[Any], tuple]]  # message -> its fields' values, in field order (by `register`)
    MAX_SEQNOS: ClassVar[int]  # a message with a seqno list: the most it carries (by `register`)

    def encode_body(self) -> bytes:
        cls = type(self)  # the class's getter, not bound to the message
        return cls._STRUCT.pack(*cls._VALUES(self)) if cls.FORMAT else b""

    @classmethod
    def decode_body(cls, body: bytes) -> "Message":
        fmt = cls._STRUCT
        if len(body) != fmt.size:
            raise WireError("truncated", f"{cls.__name__} body is {len(body)} bytes, expected {fmt.size}")
        return cls(*fmt.unpack(body))

    @property
    def type_name(self) -> str:
        return type(self).__name__


def register(cls: type[Message], type_code: int, fmt: str | None = None, layout: Layout | None = None,
             max_seqnos: int | None = None) -> None:
    """Make `cls` decodable under `type_code` (its `TYPE`; codes must be unique), with `fmt` as its `FORMAT` and
    `layout` as its `LAYOUT` (None: as inherited), and compile its `FORMAT` (`_STRUCT`) and the getter of its
    fields' values (`_VALUES`, used when FORMAT is the whole body). `max_seqnos`: the longest seqno list it
    carries. Called after the class body, not as a decorator: mypyc compiles a class with a decorator other than
    `dataclass` as a plain Python class, which may not inherit the compiled `Message`; and the class constants
    are not in the body, where mypyc would take them for dataclass fields (mypyc/mypyc#1122)."""
    if type_code in _REGISTRY and _REGISTRY[type_code] is not cls:
        raise ValueError(f"wire type {type_code} used by both {_REGISTRY[type_code].__name__} and {cls.__name__}")
    cls.TYPE = type_code
    if fmt is not None:
        cls.FORMAT = fmt
    if layout is not None:
        cls.LAYOUT = layout
    if max_seqnos is not None:
        cls.MAX_SEQNOS = max_seqnos
    cls._STRUCT = struct.Struct("!" + cls.FORMAT)
    names = [f.name for f in fields(cast(Any, cls))]  # a dataclass
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        cls._VALUES = staticmethod(lambda msg: (one(msg),))
    elif names:
        cls._VALUES = staticmethod(operator.attrgetter(*names))  # a tuple for two names or more
    _REGISTRY[type_code] = cls
    _DECODERS[type_code] = cls.decode_body


def message_types() -> dict[int, type[Message]]:
    """Every registered message class by type code (for dissectors and tests)."""
    return dict(_REGISTRY)


def encode_message(msg: Message) -> bytes:
    body = msg.encode_body()
    if len(body) > 0xFFFF:
        raise ValueError(f"{msg.type_name} body of {len(body)} bytes exceeds 65535")
    return _MSG_HEAD.pack(msg.TYPE, len(body)) + body


def encode_datagram(cluster_id: int, sender: str, messages: list[Message] | list[bytes], incarnation: int = 0,
                    key: WireKey | None = None) -> bytes:
    """Encode messages (objects, or bytes already made by `encode_message`) from `sender` into one datagram,
    signed with `key` when one is given."""
    name = sender.encode()
    if not 0 < len(name) <= MAX_SENDER_BYTES:
        raise ValueError(f"sender name {sender!r} must be 1..{MAX_SENDER_BYTES} bytes")
    if not 0 < len(messages) <= MAX_MESSAGES:
        raise ValueError(f"a datagram carries 1..{MAX_MESSAGES} messages, got {len(messages)}")
    version = VERSION if key is None else VERSION | SIGNED
    parts = [_HEAD.pack(MAGIC, version, cluster_id, incarnation, len(name)), name, _COUNT.pack(len(messages))]
    parts += [m if isinstance(m, bytes) else encode_message(m) for m in messages]
    data = b"".join(parts)
    if len(data) > MAX_DATAGRAM_BYTES:
        raise ValueError(f"datagram of {len(data)} bytes exceeds {MAX_DATAGRAM_BYTES}")
    return data if key is None else data + key.tag(data)


def bundle(cluster_id: int, sender: str, encoded: list[bytes], incarnation: int, limit_bytes: int,
           key: WireKey | None = None) -> list[bytes]:
    """Pack encoded messages (from `encode_message`) into as few datagrams as fit `limit_bytes` each, the tag
    included when signed with `key` (capped at MAX_DATAGRAM_BYTES before the tag), and MAX_MESSAGES messages
    each, in order; `limit_bytes` 0 is one message per datagram. The runtime and the simulator both bundle
    through here."""
    if limit_bytes == 0 or len(encoded) == 1:
        return [encode_datagram(cluster_id, sender, [m], incarnation, key) for m in encoded]
    tag_bytes = 0 if key is None else TAG_BYTES
    head = header_size(sender) + tag_bytes
    limit_bytes = min(limit_bytes, MAX_DATAGRAM_BYTES + tag_bytes)
    out: list[bytes] = []
    batch: list[bytes] = []
    size = head
    for msg in encoded:
        if batch and (size + len(msg) > limit_bytes or len(batch) >= MAX_MESSAGES):
            out.append(encode_datagram(cluster_id, sender, batch, incarnation, key))
            batch, size = [], head
        batch.append(msg)
        size += len(msg)
    if batch:
        out.append(encode_datagram(cluster_id, sender, batch, incarnation, key))
    return out


# --- the authenticated wire --------------------------------------------------------------------------------------
_SIGNED_MIN_BYTES = HEAD_BYTES + TAG_BYTES  # the fixed header and a tag: the least a signed datagram can be


def is_signed(data: bytes) -> bool:
    """Whether `data` has our magic and a version byte that says a tag follows the messages (no check of it)."""
    return len(data) > VERSION_OFFSET and data[:2] == MAGIC and bool(data[VERSION_OFFSET] & SIGNED)


def check_tag(key: WireKey, data: bytes) -> str | None:
    """None when `data` is a signed datagram whose tag `key` made; else why not (what a node with a key drops as
    `unauthenticated`, before any decode). One HMAC of the datagram; the checks before it are the hot path's."""
    if len(data) >= _SIGNED_MIN_BYTES and data[VERSION_OFFSET] & SIGNED and data.startswith(MAGIC):
        return None if key.matches(data) else "the tag is not the run key's tag of these bytes"
    if not is_signed(data):
        return "no tag: not a signed datagram" if data[:2] == MAGIC else "no tag: not a splitlab datagram"
    return f"{len(data)} bytes: too short for a header and a tag"


def sign(key: WireKey, data: bytes) -> bytes:
    """Any bytes (a forged or fuzzed datagram, as they are) made a signed datagram of `key`: `SIGNED` set in the
    version byte, when there is one, and the tag appended. For a datagram that may be signed already, sign its
    `unsign`ed form."""
    if len(data) > VERSION_OFFSET:
        data = data[:VERSION_OFFSET] + bytes([data[VERSION_OFFSET] | SIGNED]) + data[VERSION_OFFSET + 1:]
    return data + key.tag(data)


def unsign(data: bytes) -> bytes:
    """The open form of a signed datagram (flag cleared, tag cut off); any other bytes as they are."""
    if not is_signed(data) or len(data) < _SIGNED_MIN_BYTES:
        return data
    return data[:VERSION_OFFSET] + bytes([data[VERSION_OFFSET] & ~SIGNED]) + data[VERSION_OFFSET + 1:-TAG_BYTES]


def reseal(key: WireKey | None, original: bytes, rewritten: bytes) -> bytes:
    """A datagram rewritten from `original` (its header, some of its messages: the shaper's message rules) made
    as authentic as the original was: unsigned when it was, signed with `key` when its tag was `key`'s, else
    carrying the original's tag again (which does not vouch for the new bytes: the receiver drops it)."""
    if not is_signed(original):
        return rewritten
    if key is not None and check_tag(key, original) is None:
        return rewritten + key.tag(rewritten)
    return rewritten + original[-TAG_BYTES:]


def header_size(sender: str) -> int:
    """Bytes of the datagram header for `sender` (for bundling size limits)."""
    return _HEAD.size + len(sender.encode()) + _COUNT.size


def decode_datagram(data: bytes, cluster_id: int | None) -> tuple[str, list[Message]]:
    """Decode a datagram into (sender, messages). Raises `WireError` for anything malformed or foreign.

    `cluster_id=None` accepts any cluster (for dissectors and captures). A signed datagram decodes to its
    messages, its tag left unchecked (a node with a key asks `check_tag` first).
    """
    sender, _, messages = decode_datagram_from(data, cluster_id)
    return sender, messages


def decode_datagram_from(data: bytes, cluster_id: int | None) -> tuple[str, int, list[Message]]:
    """`decode_datagram` with the sender's incarnation: (sender, incarnation, messages)."""
    if len(data) < _HEAD_SIZE:
        raise WireError("truncated", f"{len(data)} bytes is shorter than the header")
    magic, version, cid, incarnation, name_len = _HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise WireError("foreign", f"magic {magic!r} is not {MAGIC!r}")
    end = len(data)
    if version != VERSION:
        if version != VERSION | SIGNED:
            raise WireError("version", f"version {version & ~SIGNED}, this node speaks {VERSION}")
        end -= TAG_BYTES  # a signed datagram: the messages end where the tag starts (checked before, with a key)
    if cluster_id is not None and cid != cluster_id:
        raise WireError("foreign", f"cluster id {cid:#010x}, expected {cluster_id:#010x}")
    if not 0 < name_len <= MAX_SENDER_BYTES:
        raise WireError("absurd", f"sender length {name_len}")
    pos = _HEAD_SIZE
    if end < pos + name_len + _COUNT_SIZE:
        raise WireError("truncated", "datagram ends inside the header")
    try:
        sender = data[pos:pos + name_len].decode()
    except UnicodeDecodeError as exc:
        raise WireError("absurd", f"sender name is not utf-8: {exc}") from None
    pos += name_len
    count: int = _COUNT.unpack_from(data, pos)[0]
    pos += _COUNT_SIZE
    if not 0 < count <= MAX_MESSAGES:
        raise WireError("absurd", f"message count {count}")
    messages: list[Message] = []
    for index in range(count):
        if end < pos + _MSG_HEAD_SIZE:
            raise WireError("truncated", f"datagram ends before message {index}")
        mtype, body_len = _MSG_HEAD.unpack_from(data, pos)
        pos += _MSG_HEAD_SIZE
        if end < pos + body_len:
            raise WireError("truncated", f"message {index} body runs past the datagram end")
        decode = _DECODERS.get(mtype)
        if decode is None:
            raise WireError("unknown-type", f"message {index} has type {mtype}")
        try:
            messages.append(decode(data[pos:pos + body_len]))
        except WireError:
            raise
        except (struct.error, ValueError, UnicodeDecodeError) as exc:
            raise WireError("absurd", f"message {index} ({_REGISTRY[mtype].__name__}): {exc}") from None
        pos += body_len
    if pos != end:
        raise WireError("absurd", f"{end - pos} trailing bytes")
    return sender, incarnation, messages


def field_names(cls: type[Message]) -> list[str]:
    return [f.name for f in fields(cast(Any, cls))]  # a dataclass


_FIXED_KINDS = {"B": "u8", "H": "u16", "I": "u32", "Q": "u64"}
LAYOUT_KINDS = ("u8", "u16", "u32", "u64", "bool", "payload", "seqnos", "name_list", "names")


def body_layout(cls: type[Message]) -> Layout:
    """The body of `cls` as (kind, field) in wire order: its declared `LAYOUT`, else its fixed `FORMAT`'s fields.
    Kinds: u8/u16/u32/u64 (unsigned, network order), bool (a byte 0 or 1), payload (a u32 length, then bytes),
    seqnos (a u16 count, then a u64 each), name_list (a name list whose count is the number of space-separated
    fields it fills, one name each), names (a name list into one field); a name list is a u8 count and, per name,
    a u8 length and utf-8 bytes. Raises `ValueError` for a class neither describes."""
    if cls.LAYOUT:
        return cls.LAYOUT
    names = field_names(cls)
    if len(cls.FORMAT) != len(names) or any(c not in _FIXED_KINDS for c in cls.FORMAT):
        raise ValueError(f"{cls.__name__}: FORMAT {cls.FORMAT!r} does not describe its fields {names}: declare a "
                         f"LAYOUT")
    return tuple((_FIXED_KINDS[c], name) for c, name in zip(cls.FORMAT, names))


# --- liveness and the ping workload (1-15) --------------------------------------------------------------------
@dataclass(slots=True, unsafe_hash=True)
class Heartbeat(Message):
    """Sent to every member every heartbeat interval; `counter` grows by one per heartbeat."""

    counter: int

register(Heartbeat, 1, "Q")


@dataclass(slots=True, unsafe_hash=True)
class Ping(Message):
    """The ping workload's probe; answered with a `Pong` carrying the same `ping_id`."""

    ping_id: int

register(Ping, 2, "Q")


@dataclass(slots=True, unsafe_hash=True)
class Pong(Message):
    """Answer to `Ping`."""

    ping_id: int

register(Pong, 3, "Q")


# --- reliable unicast (16-47): node/unicast ---------------------------------------------------------------------
# conn_id 0 means "no connection id" (unicast1 always, unicast2 on messages other than the first).

def _split_tail(cls: type[Message], body: bytes) -> tuple[tuple, bytes]:
    """Unpack the fixed head of `cls` (its FORMAT) and return it with the rest of the body."""
    head = cls._STRUCT
    if len(body) < head.size:
        raise WireError("truncated", f"{cls.__name__} body is {len(body)} bytes, its fixed part needs {head.size}")
    return head.unpack_from(body, 0), body[head.size:]


def _flag(cls: type[Message], value: int) -> bool:
    if value not in (0, 1):
        raise WireError("absurd", f"{cls.__name__} flag byte is {value}, expected 0 or 1")
    return bool(value)


@dataclass(slots=True, unsafe_hash=True, init=False)  # __init__ written out: see node.core
class UnicastData(Message):
    """An application payload on a unicast connection: `seqno` in the sender's window for this receiver.

    Body: seqno u64 | conn_id u32 | first u8 | payload_len u32 | payload.
    """

    seqno: int
    conn_id: int
    first: bool
    payload: bytes

    def __init__(self, seqno: int, conn_id: int, first: bool, payload: bytes) -> None:
        self.seqno = seqno
        self.conn_id = conn_id
        self.first = first
        self.payload = payload

    def encode_body(self) -> bytes:
        return self._STRUCT.pack(self.seqno, self.conn_id, 1 if self.first else 0, len(self.payload)) + self.payload

    @classmethod
    def decode_body(cls, body: bytes) -> "UnicastData":
        # `_split_tail` and `_flag` written out, the head's `Struct` and size module constants (below the
        # class): the node decodes one of these per message it receives
        if len(body) < _UNICAST_DATA_HEAD_SIZE:
            _split_tail(cls, body)  # raises its "truncated"
        seqno, conn_id, first, length = _UNICAST_DATA_HEAD.unpack_from(body, 0)
        follow = len(body) - _UNICAST_DATA_HEAD_SIZE
        if length != follow:
            if length > follow:
                raise WireError("truncated", f"UnicastData payload_len {length}, only {follow} bytes follow")
            raise WireError("absurd", f"UnicastData payload_len {length}, but {follow} bytes follow")
        if first > 1:
            _flag(cls, first)  # raises its "absurd"
        return cls(seqno, conn_id, first == 1, body[_UNICAST_DATA_HEAD_SIZE:])

register(UnicastData, 16, "QIBI",
         layout=(("u64", "seqno"), ("u32", "conn_id"), ("bool", "first"), ("payload", "payload")))
# its head for its decoder, as `Final` module constants (a class attribute is a type lookup per message)
_UNICAST_DATA_HEAD: Final = UnicastData._STRUCT
_UNICAST_DATA_HEAD_SIZE: Final[int] = UnicastData._STRUCT.size


@dataclass(slots=True, unsafe_hash=True, init=False)  # __init__ written out: see node.core
class UnicastAck(Message):
    """Acknowledges `seqno` (cumulative in unicast3; one message in unicast1/unicast2) on connection `conn_id`."""

    seqno: int
    conn_id: int
    timestamp: int

    def __init__(self, seqno: int, conn_id: int, timestamp: int) -> None:
        self.seqno = seqno
        self.conn_id = conn_id
        self.timestamp = timestamp

register(UnicastAck, 17, "QII")


@dataclass(slots=True, unsafe_hash=True)
class UnicastStable(Message):
    """unicast2: the receiver delivered everything up to `seqno` on `conn_id`; the sender may purge it."""

    seqno: int
    conn_id: int

register(UnicastStable, 18, "QI")


@dataclass(slots=True, unsafe_hash=True)
class UnicastXmitReq(Message):
    """Receiver to sender: resend `seqnos` of connection `conn_id` (0: unknown).

    Body: conn_id u32 | count u16 | count x seqno u64.
    """

    conn_id: int
    seqnos: tuple[int, ...]

    def encode_body(self) -> bytes:
        if len(self.seqnos) > self.MAX_SEQNOS:
            raise ValueError(f"UnicastXmitReq carries at most {self.MAX_SEQNOS} seqnos, got {len(self.seqnos)}")
        return struct.pack(f"!IH{len(self.seqnos)}Q", self.conn_id, len(self.seqnos), *self.seqnos)

    @classmethod
    def decode_body(cls, body: bytes) -> "UnicastXmitReq":
        (conn_id, count), tail = _split_tail(cls, body)
        if count * 8 > len(tail):
            raise WireError("truncated", f"UnicastXmitReq count {count} needs {count * 8} bytes, {len(tail)} follow")
        if count * 8 < len(tail):
            raise WireError("absurd", f"UnicastXmitReq count {count}, but {len(tail)} bytes follow")
        return cls(conn_id, struct.unpack(f"!{count}Q", tail))
# max_seqnos: keeps the body (and a one-message datagram) under the size limits

register(UnicastXmitReq, 19, "IH", layout=(("u32", "conn_id"), ("seqnos", "seqnos")), max_seqnos=8000)


@dataclass(slots=True, unsafe_hash=True)
class SendFirstSeqno(Message):
    """unicast2: the receiver has no window for the sender; asks it to resend its lowest unacked message."""

    timestamp: int

register(SendFirstSeqno, 20, "I")


@dataclass(slots=True, unsafe_hash=True)
class UnicastClose(Message):
    """unicast3: the sender removed its send connection `conn_id`; the receiver removes the matching window."""

    conn_id: int

register(UnicastClose, 21, "I")


@dataclass(slots=True, unsafe_hash=True)
class UnicastSync(Message):
    """unicast3: receiver to sender: my receive window for you is missing or stale, start a sync."""


register(UnicastSync, 22)


@dataclass(slots=True, unsafe_hash=True)
class UnicastSyncOk(Message):
    """unicast3: sender to receiver: my window starts above `low`, and the connection is now `conn_id`."""

    low: int
    conn_id: int

register(UnicastSyncOk, 23, "QI")


@dataclass(slots=True, unsafe_hash=True)
class UnicastSyncAck(Message):
    """unicast3: receiver to sender: window set to connection `conn_id`; acks may be trusted again."""

    conn_id: int

register(UnicastSyncAck, 24, "I")


# --- membership (4-15): node/membership -------------------------------------------------------------------------
# Member names travel as a count u8 and then, per name, a length u8 and the utf-8 bytes.
MAX_VIEW_MEMBERS = 255


def _pack_names(names: tuple[str, ...]) -> bytes:
    if len(names) > MAX_VIEW_MEMBERS:
        raise ValueError(f"at most {MAX_VIEW_MEMBERS} names, got {len(names)}")
    parts = [struct.pack("!B", len(names))]
    for name in names:
        raw = name.encode()
        if not 0 < len(raw) <= MAX_SENDER_BYTES:
            raise ValueError(f"member name {name!r} must be 1..{MAX_SENDER_BYTES} bytes")
        parts += [struct.pack("!B", len(raw)), raw]
    return b"".join(parts)


def _unpack_names(cls: type[Message], body: bytes, count: int | None = None) -> tuple[tuple[str, ...], bytes]:
    """Decode names from the start of `body` (`count` of them, or a leading count byte); returns (names, rest)."""
    pos = 0
    if count is None:
        if not body:
            raise WireError("truncated", f"{cls.__name__} ends before its name count")
        count, pos = body[0], 1
    names = []
    for _ in range(count):
        if pos >= len(body):
            raise WireError("truncated", f"{cls.__name__} ends inside its names")
        size = body[pos]
        if not 0 < size <= MAX_SENDER_BYTES:
            raise WireError("absurd", f"{cls.__name__} name length {size}")
        if pos + 1 + size > len(body):
            raise WireError("truncated", f"{cls.__name__} name runs past the body")
        try:
            names.append(body[pos + 1:pos + 1 + size].decode())
        except UnicodeDecodeError as exc:
            raise WireError("absurd", f"{cls.__name__} name is not utf-8: {exc}") from None
        pos += 1 + size
    return tuple(names), body[pos:]


def _no_tail(cls: type[Message], tail: bytes) -> None:
    if tail:
        raise WireError("absurd", f"{cls.__name__} has {len(tail)} trailing bytes")


@dataclass(slots=True, unsafe_hash=True)
class ViewMsg(Message):
    """Coordinator to members: install view (`coord`, `n`) with `members` in join order; `merge` marks a MergeView.

    Body: n u64 | merge u8 | coord | members (names as above).
    """

    coord: str
    n: int
    merge: bool
    members: tuple[str, ...]

    def encode_body(self) -> bytes:
        return struct.pack("!QB", self.n, 1 if self.merge else 0) + _pack_names((self.coord,)) \
            + _pack_names(self.members)

    @classmethod
    def decode_body(cls, body: bytes) -> "ViewMsg":
        (n, merge), tail = _split_tail(cls, body)
        heads, tail = _unpack_names(cls, tail)
        if len(heads) != 1:
            raise WireError("absurd", f"ViewMsg carries {len(heads)} coordinator names")
        members, tail = _unpack_names(cls, tail)
        _no_tail(cls, tail)
        return cls(heads[0], n, _flag(cls, merge), members)

register(ViewMsg, 4, "QB", layout=(("u64", "n"), ("bool", "merge"), ("name_list", "coord"), ("names", "members")))


@dataclass(slots=True, unsafe_hash=True)
class ViewAck(Message):
    """Member to coordinator: view (`coord`, `n`) installed. Body: n u64 | coord (one name)."""

    coord: str
    n: int

    def encode_body(self) -> bytes:
        return struct.pack("!Q", self.n) + _pack_names((self.coord,))

    @classmethod
    def decode_body(cls, body: bytes) -> "ViewAck":
        (n,), tail = _split_tail(cls, body)
        names, tail = _unpack_names(cls, tail)
        _no_tail(cls, tail)
        if len(names) != 1:
            raise WireError("absurd", f"ViewAck carries {len(names)} coordinator names")
        return cls(names[0], n)

register(ViewAck, 5, "Q", layout=(("u64", "n"), ("name_list", "coord")))


@dataclass(slots=True, unsafe_hash=True)
class ViewInfo(Message):
    """MERGE3 announcement, sent periodically to every known member: my view (`coord`, `n`, `members`) and who I
    think coordinates it now (`acting`, the first member of it I do not suspect).

    Body: n u64 | coord, acting (two names) | members.
    """

    coord: str
    n: int
    acting: str
    members: tuple[str, ...]

    def encode_body(self) -> bytes:
        return struct.pack("!Q", self.n) + _pack_names((self.coord, self.acting)) + _pack_names(self.members)

    @classmethod
    def decode_body(cls, body: bytes) -> "ViewInfo":
        (n,), tail = _split_tail(cls, body)
        heads, tail = _unpack_names(cls, tail)
        if len(heads) != 2:
            raise WireError("absurd", f"ViewInfo carries {len(heads)} head names, expected 2")
        members, tail = _unpack_names(cls, tail)
        _no_tail(cls, tail)
        return cls(heads[0], n, heads[1], members)

register(ViewInfo, 6, "Q", layout=(("u64", "n"), ("name_list", "coord acting"), ("names", "members")))


# --- reliable multicast (48-79): node/multicast (NAKACK4 and the broadcast-link start sync) -----------------------
SYNC_CAPABLE = 0x01  # flags bit: the sender speaks the TIPC-style BCAST_STATE sync (c64f7a6a)


def _payload_tail(cls: type[Message], length: int, tail: bytes) -> bytes:
    if length > len(tail):
        raise WireError("truncated", f"{cls.__name__} payload_len {length}, only {len(tail)} bytes follow")
    if length < len(tail):
        raise WireError("absurd", f"{cls.__name__} payload_len {length}, but {len(tail)} bytes follow")
    return bytes(tail)


@dataclass(slots=True, unsafe_hash=True, init=False)  # __init__ written out: see node.core
class Nakack4Msg(Message):
    """A multicast payload with the sender's `seqno`. Body: seqno u64 | payload_len u32 | payload."""

    seqno: int
    payload: bytes

    def __init__(self, seqno: int, payload: bytes) -> None:
        self.seqno = seqno
        self.payload = payload

    def encode_body(self) -> bytes:
        return self._STRUCT.pack(self.seqno, len(self.payload)) + self.payload

    @classmethod
    def decode_body(cls, body: bytes) -> "Nakack4Msg":
        (seqno, length), tail = _split_tail(cls, body)
        return cls(seqno, _payload_tail(cls, length, tail))

register(Nakack4Msg, 48, "QI", layout=(("u64", "seqno"), ("payload", "payload")))


@dataclass(slots=True, unsafe_hash=True)
class Nakack4XmitReq(Message):
    """Receiver to the original `sender`: resend `seqnos`. Body: sender (one name) | count u16 | seqno u64 each."""

    sender: str
    seqnos: tuple[int, ...]

    def encode_body(self) -> bytes:
        if len(self.seqnos) > self.MAX_SEQNOS:
            raise ValueError(f"Nakack4XmitReq carries at most {self.MAX_SEQNOS} seqnos, got {len(self.seqnos)}")
        return _pack_names((self.sender,)) + struct.pack(f"!H{len(self.seqnos)}Q", len(self.seqnos), *self.seqnos)

    @classmethod
    def decode_body(cls, body: bytes) -> "Nakack4XmitReq":
        names, tail = _unpack_names(cls, body)
        if len(names) != 1:
            raise WireError("absurd", f"Nakack4XmitReq names {len(names)} senders")
        if len(tail) < 2:
            raise WireError("truncated", "Nakack4XmitReq ends before its seqno count")
        (count,) = struct.unpack_from("!H", tail, 0)
        rest = tail[2:]
        if count * 8 != len(rest):
            raise WireError("truncated" if count * 8 > len(rest) else "absurd",
                            f"Nakack4XmitReq count {count}, but {len(rest)} bytes follow")
        return cls(names[0], struct.unpack(f"!{count}Q", rest))

register(Nakack4XmitReq, 49, "", layout=(("name_list", "sender"), ("seqnos", "seqnos")), max_seqnos=8000)


@dataclass(slots=True, unsafe_hash=True, init=False)  # Nakack4Msg's __init__
class Nakack4XmitRsp(Nakack4Msg):
    """A retransmitted multicast (answer to an XMIT_REQ) of the datagram's sender. Body as `Nakack4Msg`; a type
    of its own so receivers and dissectors tell resends apart (layers dispatch on the exact type)."""


register(Nakack4XmitRsp, 50)  # FORMAT and LAYOUT: Nakack4Msg's


@dataclass(slots=True, unsafe_hash=True)
class Nakack4Highest(Message):
    """An idle sender with unacked messages: my highest sent seqno is `seqno` (receivers ask for a lost tail)."""

    seqno: int

register(Nakack4Highest, 51, "Q")


@dataclass(slots=True, unsafe_hash=True, init=False)  # __init__ written out: see node.core
class Nakack4Ack(Message):
    """Receiver to sender: highest delivered `seqno` (cumulative); `flags` carries SYNC_CAPABLE in bit 0 and, in
    bits 1-7, the sync generation of the BcastState it acknowledges (0: a plain ACK; node/multicast/sync.py)."""

    seqno: int
    flags: int

    def __init__(self, seqno: int, flags: int) -> None:
        self.seqno = seqno
        self.flags = flags

register(Nakack4Ack, 52, "QB")


@dataclass(slots=True, unsafe_hash=True)
class BcastState(Message):
    """Unicast, sender to a peer it adds to its receivers: my next multicast seqno is `next_seqno`, and I still hold
    everything from `low_seqno` for you (TIPC BCAST_PROTOCOL/STATE; from a legacy node, the link ACTIVATE hello).
    `flags` carries SYNC_CAPABLE in bit 0 and the sync generation in bits 1-7 (node/multicast/sync.py)."""

    next_seqno: int
    low_seqno: int
    flags: int

register(BcastState, 53, "QQB")


@dataclass(slots=True, unsafe_hash=True)
class BcastStateReq(Message):
    """Receiver to a member sender it has no window for: please send me your `BcastState`."""

    flags: int

register(BcastStateReq, 54, "B")
