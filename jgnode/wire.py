"""A sans-IO codec of JGroups 2.12.2's UDP datagrams (and of single messages): bytes in, `JgDatagram` out, and back.

Its one job: let the fault injector, the capture dissector and the sequence diagram read (and forge) the wire of
the real JGroups 2.12.2 (Debian bookworm's libjgroups-java) as it follows each UDP datagram. No I/O, no scapy:
`struct` only. The wire itself (datagram, message, addresses, every header body, the ids and magic numbers) is
declared once in `jgnode.layout`: this module reads it through that description (`jgnode.reader` compiles it),
as the generated Wireshark dissector does, so the two cannot drift. What is the codec's own: the loops (a
bundle's messages, a message's headers), the values (`JgUUID`, `JgView`, ...), the byte spans, and writing.

A header body carries no length: a header whose magic number this module cannot decode makes the rest of its
message, and of a bundle, unreadable. Such a message is returned with the headers before it and `partial` saying
why (and so is the datagram); bytes that are not a JGroups 2.12 datagram raise `WireError(reason, detail)`, never
any other exception.

`decode_datagram(data)` reads a datagram; each message keeps its byte span, so `rebuild(datagram, keep)` drops,
reorders or duplicates the messages of a bundle without re-encoding. `classify(message)` names a message for
fault rules (`Unicast2Stable`, `NakackXmitReq`, ...; `MESSAGE_TYPES` gives each name an int code >= 0x1000, clear
of splitlab's own codes < 256). `encode_datagram` writes a `JgDatagram` back (byte for byte for a decoded one);
to forge, `unicast_header`, `unicast2_header`, `nakack_header`, `stable_header`, `fd_all_header` and `tp_header`
build headers, `JgMessage(...)` a message (every message needs a `tp_header` last, with the receiver's cluster
name) and `make_datagram` a datagram as TP would send it.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from jgnode import layout
from jgnode.layout import (ADDR_IP, ADDR_NULL, ADDR_UUID, BUF_SET, COMPATIBLE_MAJOR_MINOR, DEST_SET, IPV4_LEN_BYTES,
                           IPV6_LEN_BYTES, MAGIC_FC, MAGIC_FD, MAGIC_FD_ALL, MAGIC_FD_SOCK, MAGIC_FRAG, MAGIC_GMS,
                           MAGIC_NAKACK, MAGIC_NUMBERS, MAGIC_PING, MAGIC_STABLE, MAGIC_TP, MAGIC_UNICAST,
                           MAGIC_UNICAST2, MAGIC_VERIFY_SUSPECT, MESSAGE_FLAGS, NAKACK_KINDS, OOB, PROTOCOL_FC,
                           PROTOCOL_FD_ALL, PROTOCOL_IDS, PROTOCOL_MFC, PROTOCOL_NAKACK, PROTOCOL_STABLE, PROTOCOL_UDP,
                           PROTOCOL_UFC, PROTOCOL_UNICAST, PROTOCOL_UNICAST2, SRC_SET, STABLE_KINDS, TP_LIST,
                           TP_MULTICAST, TP_OOB, UNICAST2_KINDS, UNICAST_KINDS, VERSION, VERSION_MAJOR_MASK,
                           VERSION_MAJOR_SHIFT, VERSION_MINOR_MASK, VERSION_MINOR_SHIFT, version_text)
from jgnode.reader import Compiler, Reader
from node.errors import WireError


def _code_of(kinds: dict[int, str], kind: str) -> int:
    for code, name in kinds.items():
        if name == kind:
            return code
    raise ValueError(f"unknown header kind {kind!r}; one of {sorted(kinds.values())}")


# ------------------------------------------------------------------------------------------------ values

@dataclass(frozen=True)
class JgUUID:
    """org.jgroups.util.UUID: a 128-bit logical address (msb, lsb unsigned); `additional_data` is rare."""

    msb: int
    lsb: int
    additional_data: bytes | None = None

    @property
    def pair(self) -> tuple[int, int]:
        return self.msb, self.lsb

    def __str__(self) -> str:
        """UUID.toStringLong, e.g. "6af90d3a-c360-8ae7-c13a-a2f0be5bcbe1" (toString prints the logical name when
        the JVM knows it; the wire has none)."""
        return (f"{self.msb >> 32:08x}-{(self.msb >> 16) & 0xFFFF:04x}-{self.msb & 0xFFFF:04x}-"
                f"{self.lsb >> 48:04x}-{self.lsb & 0xFFFFFFFFFFFF:012x}")


@dataclass(frozen=True)
class JgIpAddress:
    """org.jgroups.stack.IpAddress: a physical address (TCPPING's discovery requests are sent to one)."""

    ip: str
    port: int
    scope_id: int | None = None  # IPv6 only
    additional_data: bytes | None = None

    def __str__(self) -> str:
        """IpAddress.toString: "127.0.0.1:7800"."""
        return f"{self.ip}:{self.port}"


JgAddress = JgUUID | JgIpAddress | None


@dataclass(frozen=True)
class JgViewId:
    """org.jgroups.ViewId: coordinator and view number, printed "[coord|id]"."""

    coord: JgAddress
    id: int

    def __str__(self) -> str:
        return f"[{self.coord}|{self.id}]"


@dataclass(frozen=True)
class JgView:
    """org.jgroups.View (or MergeView when `subgroups` is not None). `payload` is the Java-serialized map some
    views carry, left undecoded."""

    view_id: JgViewId | None
    members: tuple[JgAddress, ...] | None
    payload: bytes = b""
    subgroups: tuple[JgView, ...] | None = None


@dataclass(frozen=True)
class JgDigestEntry:
    """One member's row of an org.jgroups.util.Digest."""

    member: JgAddress
    low: int
    highest_delivered: int
    highest_received: int


@dataclass(frozen=True)
class JgHeader:
    """One header of a message: the protocol id it was put under, its class's magic number, its type (`kind`,
    the header's own type2Str name, e.g. "XMIT_REQ"), its fields (JGroups' field names) and its body bytes."""

    proto_id: int
    magic: int
    kind: str
    fields: dict[str, Any] = field(default_factory=dict)
    body: bytes = b""

    @property
    def protocol(self) -> str:
        return PROTOCOL_IDS.get(self.proto_id, f"protocol-{self.proto_id}")

    @property
    def header_class(self) -> str:
        return MAGIC_NUMBERS.get(self.magic, f"magic-{self.magic}")

    def __str__(self) -> str:
        shown = ", ".join(f"{k}={_show(v)}" for k, v in self.fields.items())
        return f"{self.protocol}: {self.kind}" + (f", {shown}" if shown else "")


@dataclass(frozen=True)
class JgMessage:
    """One org.jgroups.Message. In a bundle `dest` is the bundle's and `src` the message's own or else the
    bundle's, as TP.readMessageList sets them. `span` is (start, end) of the message's bytes in the datagram
    (without a bundle's presence byte); `partial` says why the headers after the last one decoded (and, in a
    bundle, the messages after this one) could not be read."""

    dest: JgAddress
    src: JgAddress
    flags: int = 0
    payload: bytes | None = None
    headers: tuple[JgHeader, ...] = ()
    partial: str | None = None
    span: tuple[int, int] = field(default=(0, 0), compare=False)

    @property
    def payload_length(self) -> int:
        return 0 if self.payload is None else len(self.payload)

    @property
    def is_oob(self) -> bool:
        return bool(self.flags & OOB)

    def header(self, protocol: str | int) -> JgHeader | None:
        """The first header put by `protocol` (a name like "UNICAST2" or a protocol id), or None."""
        for h in self.headers:
            if h.proto_id == protocol or h.protocol == protocol:
                return h
        return None

    def flag_names(self) -> list[str]:
        return [name for bit, name in MESSAGE_FLAGS.items() if self.flags & bit]


@dataclass(frozen=True)
class JgDatagram:
    """One UDP datagram of JGroups: a single message or a LIST bundle. `raw` are the bytes it was decoded from
    (what `rebuild` cuts), `list_prefix_len` the length of a bundle's version, flags, dest and src."""

    version: int
    flags: int
    messages: tuple[JgMessage, ...]
    list_dest: JgAddress = None
    list_src: JgAddress = None
    partial: str | None = None
    raw: bytes = field(default=b"", compare=False, repr=False)
    list_prefix_len: int = field(default=0, compare=False)

    @property
    def version_text(self) -> str:
        return version_text(self.version)

    @property
    def is_list(self) -> bool:
        return bool(self.flags & TP_LIST)

    @property
    def is_multicast(self) -> bool:
        return bool(self.flags & TP_MULTICAST)

    @property
    def is_oob(self) -> bool:
        return bool(self.flags & TP_OOB)


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_show(v) for v in value) + ")"
    return str(value)



# ------------------------------------------------------------------------------------------------ reading
# Every read goes through jgnode.layout, compiled once; the builders make the codec's values of its records.

_U8, _I8 = struct.Struct("!B"), struct.Struct("!b")
_I16, _U16 = struct.Struct("!h"), struct.Struct("!H")
_I32 = struct.Struct("!i")
_I64, _U64 = struct.Struct("!q"), struct.Struct("!Q")


def _ip_address(f: dict[str, Any]) -> JgIpAddress:
    raw, scope_id = f["ip"], f.get("scope_id")
    if len(raw) == IPV4_LEN_BYTES:
        text = str(ipaddress.IPv4Address(raw))
    else:
        groups = struct.unpack("!8H", raw)
        text = ":".join(f"{g:x}" for g in groups) + (f"%{scope_id}" if scope_id else "")
    return JgIpAddress(text, f["port"], scope_id, f["additional_data"])


_BUILDERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "uuid": lambda f: JgUUID(f["msb"], f["lsb"], f["additional_data"]),
    "ip_address": _ip_address,
    "view_id": lambda f: JgViewId(f["coord"], f["id"]),
    "view": lambda f: JgView(f["view_id"], f["members"], f["payload"], f.get("subgroups")),
    "digest_entry": lambda f: JgDigestEntry(f["member"], f["low"], f["highest_delivered"], f["highest_received"]),
    "tuple": lambda f: tuple(f.values()),
}
_COMPILER = Compiler(layout.DEFINITIONS, _BUILDERS, layout.MAX_NESTING)
_read_version, _read_datagram_flags = (_COMPILER.value(node, "datagram") for node in layout.DATAGRAM)
_read_bundle = _COMPILER.value(layout.BUNDLE)
_read_more = _COMPILER.value(layout.BUNDLE_MORE, "bundle")
_read_message_head = _COMPILER.value(layout.MESSAGE)
_read_header_count = _COMPILER.value(layout.HEADER_COUNT, "message")
_read_header_ids = _COMPILER.record(layout.HEADER, "header")
_BODY_READERS: dict[int, Callable[[Reader], tuple[str, dict[str, Any]]]] = {
    magic: _COMPILER.header(spec) for magic, spec in layout.HEADERS.items()}
DECODED_MAGICS = frozenset(_BODY_READERS)
_read_address = _COMPILER.value(layout.DEFINITIONS["address"])


# ------------------------------------------------------------------------------------------------ decoding

class _Partial(Exception):
    """Internal: a header whose body cannot be decoded; carries the headers read so far."""

    def __init__(self, reason: str, headers: tuple[JgHeader, ...]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.headers = headers


def _read_headers(r: Reader) -> tuple[JgHeader, ...]:
    count = _read_header_count(r)
    headers: list[JgHeader] = []
    for i in range(count):
        ids = _read_header_ids(r)
        proto_id, magic = ids["proto_id"], ids["magic"]
        reader = _BODY_READERS.get(magic)
        if reader is None:
            name = MAGIC_NUMBERS.get(magic, "not in jg-magic-map.xml")
            raise _Partial(f"header {i + 1} of {count} (protocol id {proto_id}) has magic number {magic} "
                           f"({name}), which this codec does not decode: a header body has no length, so the "
                           f"headers after it are unknown", tuple(headers))
        start = r.pos
        kind, fields = reader(r)
        headers.append(JgHeader(proto_id, magic, kind, fields, r.data[start:r.pos]))
    return tuple(headers)


def _read_message(r: Reader, bundle: tuple[JgAddress, JgAddress] | None) -> JgMessage:
    """Message.readFrom; `bundle` is (dest, src) of a LIST, which set the message's dest and missing src."""
    start = r.pos
    head = _read_message_head(r)
    flags, dest, src, payload = head["flags"], head.get("dest"), head.get("src"), head.get("buffer")
    if bundle is not None:
        dest = bundle[0]
        src = src if src is not None else bundle[1]
    try:
        headers = _read_headers(r)
    except _Partial as p:
        return JgMessage(dest, src, flags, payload, p.headers, p.reason, (start, len(r.data)))
    return JgMessage(dest, src, flags, payload, headers, None, (start, r.pos))


def decode_message(data: bytes) -> JgMessage:
    """Decode one message as `Message.writeTo` writes it (what the JGroups node's trace protocol hands over; not a
    datagram: no version, no transport flags); WireError if it is not one."""
    return _read_message(Reader(bytes(data)), None)


def looks_like(data: bytes) -> bool:
    """Whether a UDP payload starts as a JGroups 2.12 datagram does (its version), before any decoding: what tells
    the real JGroups' traffic from splitlab's (`SL...`) where both may pass."""
    if len(data) < 3:
        return False
    version = int.from_bytes(data[:2], "big")
    return ((version & VERSION_MAJOR_MASK) >> VERSION_MAJOR_SHIFT,
            (version & VERSION_MINOR_MASK) >> VERSION_MINOR_SHIFT) == COMPATIBLE_MAJOR_MINOR


def decode_datagram(data: bytes) -> JgDatagram:
    """Decode one UDP payload of JGroups 2.12 (TP.IncomingPacket.run); WireError if it is not one.

    Bytes after the message (or after a bundle's terminator) are ignored, as JGroups ignores them."""
    data = bytes(data)
    r = Reader(data)
    version = _read_version(r)
    major_minor = ((version & VERSION_MAJOR_MASK) >> VERSION_MAJOR_SHIFT,
                   (version & VERSION_MINOR_MASK) >> VERSION_MINOR_SHIFT)
    if major_minor != COMPATIBLE_MAJOR_MINOR:
        raise WireError("version", f"version {version_text(version)} (0x{version:04x}) is not binary "
                                   f"compatible with {version_text(VERSION)}")
    flags = _read_datagram_flags(r)
    if not flags & TP_LIST:
        message = _read_message(r, None)
        return JgDatagram(version, flags, (message,), partial=message.partial, raw=data)
    bundle = _read_bundle(r)
    list_dest, list_src = bundle["dest"], bundle["src"]
    prefix_len = r.pos
    messages: list[JgMessage] = []
    partial = None
    while _read_more(r):
        message = _read_message(r, (list_dest, list_src))
        messages.append(message)
        if message.partial:
            partial = f"message {len(messages)} of the bundle: {message.partial}"
            break
    return JgDatagram(version, flags, tuple(messages), list_dest, list_src, partial, data, prefix_len)


def rebuild(datagram: JgDatagram, keep: Sequence[int]) -> bytes:
    """The datagram with only the messages `keep` (indices into `datagram.messages`, in the order given; an index
    may repeat), cut from its bytes without re-encoding. b"" when nothing is kept (drop the datagram).

    A single-message datagram gives its bytes unchanged for [0] (to duplicate it, send it twice). In a bundle
    each kept message gets a presence byte and the bundle a terminator; a `partial` message (always the last one
    decoded) runs to the end of the datagram, terminator included, so it can only be kept last. ValueError for
    an index out of range or a partial message kept before another."""
    raw = datagram.raw or encode_datagram(datagram)
    if not datagram.raw:
        datagram = decode_datagram(raw)
    count = len(datagram.messages)
    for index in keep:
        if not 0 <= index < count:
            raise ValueError(f"message index {index} out of range: the datagram has {count} messages")
    if not keep:
        return b""
    if not datagram.is_list:
        if list(keep) != [0]:
            raise ValueError(f"a single-message datagram can only be kept whole ([0]), not {list(keep)}")
        return raw
    parts = [raw[:datagram.list_prefix_len]]
    for position, index in enumerate(keep):
        message = datagram.messages[index]
        if message.partial and position != len(keep) - 1:
            raise ValueError(f"message {index} is partial (its end is unknown): it can only be kept last")
        parts.append(b"\x01" + raw[message.span[0]:message.span[1]])
    if not datagram.messages[keep[-1]].partial:
        parts.append(b"\x00")
    return b"".join(parts)


# ------------------------------------------------------------------------------------------------ writing

def _encode_modified_utf8(text: str) -> bytes:
    units = text.encode("utf-16-be", "surrogatepass")
    out = bytearray()
    for i in range(0, len(units), 2):
        unit = (units[i] << 8) | units[i + 1]
        if 0 < unit < 0x80:
            out.append(unit)
        elif unit < 0x800:
            out += bytes((0xC0 | unit >> 6, 0x80 | unit & 0x3F))
        else:
            out += bytes((0xE0 | unit >> 12, 0x80 | (unit >> 6) & 0x3F, 0x80 | unit & 0x3F))
    return out


def _utf(text: str) -> bytes:
    encoded = _encode_modified_utf8(text)
    if len(encoded) > 0xFFFF:
        raise ValueError(f"string of {len(encoded)} bytes: writeUTF takes at most 65535")
    return _U16.pack(len(encoded)) + encoded


def _extra(additional_data: bytes | None) -> bytes:
    if additional_data is None:
        return b"\x00"
    return b"\x01" + _U16.pack(len(additional_data)) + additional_data


def _ip_body(addr: JgIpAddress) -> bytes:
    host = addr.ip.split("%", 1)[0]
    packed = ipaddress.ip_address(host).packed
    scope = _I32.pack(addr.scope_id or 0) if len(packed) == IPV6_LEN_BYTES else b""
    return bytes((len(packed),)) + packed + scope + _U16.pack(addr.port) + _extra(addr.additional_data)


def encode_address(addr: JgAddress) -> bytes:
    """Util.writeAddress."""
    if addr is None:
        return bytes((ADDR_NULL,))
    if isinstance(addr, JgUUID):
        return bytes((ADDR_UUID,)) + _U64.pack(addr.lsb) + _U64.pack(addr.msb) + _extra(addr.additional_data)
    if isinstance(addr, JgIpAddress):
        return bytes((ADDR_IP,)) + _ip_body(addr)
    raise TypeError(f"not a JGroups address: {addr!r}")


def _encode_digest(entries: Iterable[JgDigestEntry]) -> bytes:
    rows = list(entries)
    out = [_I16.pack(len(rows))]
    for e in rows:
        out.append(encode_address(e.member) + struct.pack("!qqq", e.low, e.highest_delivered, e.highest_received))
    return b"".join(out)


def _header(proto_id: int, magic: int, body: bytes) -> JgHeader:
    """A header from its body bytes, its kind and fields read back by the decoder (so they agree)."""
    r = Reader(body)
    kind, fields = _BODY_READERS[magic](r)
    if r.pos != len(body):
        raise ValueError(f"header body of {len(body)} bytes, {r.pos} read")
    return JgHeader(proto_id, magic, kind, fields, body)


def unicast_header(kind: str, *, seqno: int = 0, conn_id: int = 0, first: bool = False,
                   proto_id: int = PROTOCOL_UNICAST) -> JgHeader:
    """UNICAST$UnicastHeader: DATA(seqno, conn_id, first), ACK(seqno) or SEND_FIRST_SEQNO."""
    body = _I8.pack(_code_of(UNICAST_KINDS, kind))
    if kind == "DATA":
        body += struct.pack("!qh?", seqno, conn_id, first)
    elif kind == "ACK":
        body += _I64.pack(seqno)
    return _header(proto_id, MAGIC_UNICAST, body)


def unicast2_header(kind: str, *, seqno: int = 0, high_seqno: int = 0, conn_id: int = 0, first: bool = False,
                    proto_id: int = PROTOCOL_UNICAST2) -> JgHeader:
    """UNICAST2$Unicast2Header: DATA(seqno, conn_id, first), XMIT_REQ(seqno, high_seqno), STABLE(seqno,
    high_seqno) or SEND_FIRST_SEQNO(seqno)."""
    body = _I8.pack(_code_of(UNICAST2_KINDS, kind))
    if kind == "DATA":
        body += struct.pack("!qh?", seqno, conn_id, first)
    elif kind in ("XMIT_REQ", "STABLE"):
        body += struct.pack("!qq", seqno, high_seqno)
    else:
        body += _I64.pack(seqno)
    return _header(proto_id, MAGIC_UNICAST2, body)


def nakack_header(kind: str, *, seqno: int = -1, range: tuple[int, int] | None = None,  # noqa: A002 (JGroups' name)
                  sender: JgAddress = None, proto_id: int = PROTOCOL_NAKACK) -> JgHeader:
    """pbcast.NakAckHeader: MSG(seqno), XMIT_RSP(seqno) or XMIT_REQ(range=(low, high), sender)."""
    body = _I8.pack(_code_of(NAKACK_KINDS, kind))
    if kind in ("MSG", "XMIT_RSP"):
        body += _I64.pack(seqno)
    else:
        body += (b"\x00" if range is None else b"\x01" + struct.pack("!qq", *range)) + encode_address(sender)
    return _header(proto_id, MAGIC_NAKACK, body)


def stable_header(kind: str, digest: Iterable[JgDigestEntry] | None,
                  proto_id: int = PROTOCOL_STABLE) -> JgHeader:
    """pbcast.STABLE$StableHeader: STABLE_GOSSIP or STABILITY with a digest."""
    body = _I32.pack(_code_of(STABLE_KINDS, kind))
    body += b"\x00" if digest is None else b"\x01" + _encode_digest(digest)
    return _header(proto_id, MAGIC_STABLE, body)


def fd_all_header(proto_id: int = PROTOCOL_FD_ALL) -> JgHeader:
    """FD_ALL$HeartbeatHeader (no body)."""
    return _header(proto_id, MAGIC_FD_ALL, b"")


def tp_header(cluster_name: str, proto_id: int = PROTOCOL_UDP) -> JgHeader:
    """TpHeader: the cluster name; every message needs one or the receiving transport drops it."""
    return _header(proto_id, MAGIC_TP, _utf(cluster_name))


def encode_message(message: JgMessage, bundle_src: JgAddress = None, *, in_bundle: bool = False) -> bytes:
    """Message.writeTo, or inside a bundle Message.writeToNoAddrs(bundle_src): no dest, and the src only when
    it differs from the bundle's (or the bundle has none)."""
    if message.partial:
        raise ValueError(f"a partial message cannot be encoded: {message.partial}")
    write_dest = not in_bundle and message.dest is not None
    if in_bundle:
        write_src = bundle_src is None or (message.src is not None and message.src != bundle_src)
    else:
        write_src = message.src is not None
    leading = (DEST_SET if write_dest else 0) | (SRC_SET if write_src else 0)
    leading |= BUF_SET if message.payload is not None else 0
    out = [bytes((leading, message.flags & 0xFF))]
    if write_dest:
        out.append(encode_address(message.dest))
    if write_src:
        out.append(encode_address(message.src))
    if message.payload is not None:
        out.append(_I32.pack(len(message.payload)) + message.payload)
    out.append(_I16.pack(len(message.headers)))
    for h in message.headers:
        out.append(struct.pack("!hh", h.proto_id, h.magic) + h.body)
    return b"".join(out)


def encode_datagram(datagram: JgDatagram) -> bytes:
    """TP.writeMessage (one message) or TP.writeMessageList (a LIST bundle)."""
    head = _U16.pack(datagram.version) + bytes((datagram.flags,))
    if not datagram.is_list:
        if len(datagram.messages) != 1:
            raise ValueError(f"a datagram without the LIST flag holds one message, not {len(datagram.messages)}")
        return head + encode_message(datagram.messages[0])
    out = [head, encode_address(datagram.list_dest), encode_address(datagram.list_src)]
    for message in datagram.messages:
        out.append(b"\x01" + encode_message(message, datagram.list_src, in_bundle=True))
    out.append(b"\x00")
    return b"".join(out)


def make_datagram(messages: Sequence[JgMessage], *, multicast: bool = False, bundle: bool = False,
                  list_dest: JgAddress = None, list_src: JgAddress = None, version: int = VERSION) -> JgDatagram:
    """A datagram as TP would send it: one message (OOB flag copied from it), or a LIST bundle whose messages
    take the bundle's dest and, when they have none, its src (as the receiver reads them)."""
    flags = TP_MULTICAST if multicast else 0
    if not bundle:
        if len(messages) != 1:
            raise ValueError(f"one message without bundle=True, not {len(messages)}")
        flags |= TP_OOB if messages[0].is_oob else 0
        return JgDatagram(version, flags, (messages[0],))
    normalized = tuple(dataclasses.replace(m, dest=list_dest, src=m.src if m.src is not None else list_src)
                       for m in messages)
    return JgDatagram(version, flags | TP_LIST, normalized, list_dest, list_src)


# ------------------------------------------------------------------------------------------------ classifying

# One stable int code per type name (rules are keyed by code). All >= 0x1000: splitlab's own codes are < 256.
MESSAGE_TYPES: dict[str, int] = {
    "JgOther": 0x1000,
    "Unicast2Data": 0x1010, "Unicast2XmitReq": 0x1011, "Unicast2SendFirstSeqno": 0x1012, "Unicast2Stable": 0x1013,
    "UnicastData": 0x1020, "UnicastAck": 0x1021, "UnicastSendFirstSeqno": 0x1022,
    "NakackMsg": 0x1030, "NakackXmitReq": 0x1031, "NakackXmitRsp": 0x1032,
    "GmsJoinReq": 0x1040, "GmsJoinRsp": 0x1041, "GmsLeaveReq": 0x1042, "GmsLeaveRsp": 0x1043, "GmsView": 0x1044,
    "GmsMergeReq": 0x1045, "GmsMergeRsp": 0x1046, "GmsInstallMergeView": 0x1047, "GmsCancelMerge": 0x1048,
    "GmsViewAck": 0x1049, "GmsJoinReqWithStateTransfer": 0x104A, "GmsInstallMergeViewOk": 0x104B,
    "GmsGetDigestReq": 0x104C, "GmsGetDigestRsp": 0x104D, "GmsInstallDigest": 0x104E,
    "StableGossip": 0x1050, "StableStabilityMsg": 0x1051,
    "VerifySuspectAreYouDead": 0x1060, "VerifySuspectIAmNotDead": 0x1061,
    "PingReq": 0x1070, "PingRsp": 0x1071, "Merge2DiscoveryReq": 0x1072, "Merge2DiscoveryRsp": 0x1073,
    "FdAllHeartbeat": 0x1080, "FdHeartbeat": 0x1081, "FdHeartbeatAck": 0x1082, "FdSuspect": 0x1083,
    "FdSockSuspect": 0x1090, "FdSockWhoHasSock": 0x1091, "FdSockIHaveSock": 0x1092, "FdSockGetCache": 0x1093,
    "FdSockGetCacheRsp": 0x1094,
    "Frag2Fragment": 0x10A0,
    "UfcReplenish": 0x10B0, "UfcCreditRequest": 0x10B1, "MfcReplenish": 0x10B2, "MfcCreditRequest": 0x10B3,
    "FcReplenish": 0x10B4, "FcCreditRequest": 0x10B5,
}
NAMES_BY_CODE = {code: name for name, code in MESSAGE_TYPES.items()}

# classify's order: the reliability protocols first (what a fault rule on retransmission aims at), then
# membership and stability (which ride on NAKACK/UNICAST*), then failure detection and discovery, then FRAG2 and
# flow control. A magic number not listed here (TpHeader, unknown ones) never names a message.
CLASSIFY_ORDER: tuple[int, ...] = (
    MAGIC_UNICAST2, MAGIC_UNICAST, MAGIC_NAKACK,
    MAGIC_GMS, MAGIC_STABLE,
    MAGIC_VERIFY_SUSPECT, MAGIC_FD_SOCK, MAGIC_FD, MAGIC_FD_ALL, MAGIC_PING,
    MAGIC_FRAG, MAGIC_FC,
)
_RELIABILITY_MAGICS = frozenset((MAGIC_UNICAST2, MAGIC_UNICAST, MAGIC_NAKACK))

_FC_PREFIX = {PROTOCOL_UFC: "Ufc", PROTOCOL_MFC: "Mfc", PROTOCOL_FC: "Fc"}


def _camel(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_"))


def _header_type(h: JgHeader) -> tuple[str, dict[str, Any]] | None:
    """The type name and rule fields of one header, or None when it names nothing (an unknown kind)."""
    if h.kind.startswith("UNKNOWN_"):
        return None
    f = h.fields
    if h.magic == MAGIC_UNICAST2:
        name = "Unicast2" + _camel(h.kind)
        if h.kind == "DATA":
            return name, {"seqno": f["seqno"], "conn_id": f["conn_id"], "first": f["first"]}
        if h.kind in ("XMIT_REQ", "STABLE"):
            return name, {"seqno": f["seqno"], "high": f["high_seqno"]}
        return name, {"seqno": f["seqno"]}
    if h.magic == MAGIC_UNICAST:
        name = "Unicast" + _camel(h.kind)
        if h.kind == "DATA":
            return name, {"seqno": f["seqno"], "conn_id": f["conn_id"], "first": f["first"]}
        return name, ({"seqno": f["seqno"]} if "seqno" in f else {})
    if h.magic == MAGIC_NAKACK:
        name = "Nakack" + _camel(h.kind)
        if h.kind == "XMIT_REQ":
            low, high = f["range"] if f["range"] is not None else (-1, -1)
            return name, {"seqno": low, "high": high, "sender": _text(f["sender"])}
        return name, {"seqno": f["seqno"]}
    if h.magic == MAGIC_GMS:
        fields = {"mbr": _text(f["mbr"])} if f["mbr"] is not None else {}
        if f["view"] is not None and f["view"].view_id is not None:
            fields["view_id"] = str(f["view"].view_id)
        return "Gms" + _camel(h.kind), fields
    if h.magic == MAGIC_STABLE:
        return ("StableGossip" if h.kind == "STABLE_GOSSIP" else "StableStabilityMsg"), {}
    if h.magic == MAGIC_VERIFY_SUSPECT:
        return "VerifySuspect" + _camel(h.kind), {"from": _text(f["from"])}
    if h.magic == MAGIC_FD_ALL:
        return "FdAllHeartbeat", {}
    if h.magic == MAGIC_FD:
        return "Fd" + _camel(h.kind), {}
    if h.magic == MAGIC_FD_SOCK:
        return "FdSock" + _camel(h.kind), {}
    if h.magic == MAGIC_PING:
        return _ping_type(h)
    if h.magic == MAGIC_FRAG:
        return "Frag2Fragment", {"id": f["id"], "frag_id": f["frag_id"], "num_frags": f["num_frags"]}
    if h.magic == MAGIC_FC:
        return _FC_PREFIX.get(h.proto_id, "Fc") + _camel(h.kind), {}
    return None


def _ping_type(h: JgHeader) -> tuple[str, dict[str, Any]]:
    """Discovery: a request with a view_id is MERGE2's merge-triggered FIND_ALL_VIEWS (Discovery; MERGE2 has no
    header of its own in 2.12.2), and so is a response whose PingData carries a whole view."""
    data = h.fields["data"]
    cluster = h.fields["cluster_name"]
    fields = {"cluster": cluster} if cluster is not None else {}
    if h.kind == "GET_MBRS_REQ":
        return ("Merge2DiscoveryReq" if h.fields["view_id"] is not None else "PingReq"), fields
    return ("Merge2DiscoveryRsp" if data is not None and data["view"] is not None else "PingRsp"), fields


def _text(addr: JgAddress) -> str | None:
    return None if addr is None else str(addr)


def _ranked(message: JgMessage) -> list[tuple[int, str, dict[str, Any]]]:
    ranked = []
    for h in message.headers:
        if h.magic in CLASSIFY_ORDER:
            typed = _header_type(h)
            if typed is not None:
                ranked.append((CLASSIFY_ORDER.index(h.magic), typed[0], typed[1]))
    ranked.sort(key=lambda item: item[0])
    return ranked


def classify(message: JgMessage) -> tuple[str, dict[str, Any]]:
    """The message's type name for fault rules and its fields, from the first of its headers in
    CLASSIFY_ORDER: a UNICAST2/UNICAST/NAKACK header decides (DATA: seqno, conn_id, first; a request for a range:
    seqno = its low, high; NAKACK's XMIT_REQ also sender), else GMS, STABLE, failure detection, discovery, FRAG2,
    flow control. When a reliability header decides and the message also carries another protocol's header, its
    type is in `inner` (e.g. a GMS VIEW travels as NakackMsg with inner GmsView). ("JgOther", {}) when no
    header names it."""
    ranked = _ranked(message)
    if not ranked:
        return "JgOther", {}
    _, name, fields = ranked[0]
    fields = dict(fields)
    if len(ranked) > 1 and CLASSIFY_ORDER[ranked[0][0]] in _RELIABILITY_MAGICS:
        fields["inner"] = ranked[1][1]
    return name, fields


def header_types(message: JgMessage) -> tuple[str, ...]:
    """The type name of every header that has one, in CLASSIFY_ORDER (classify's choice first)."""
    return tuple(name for _, name, _ in _ranked(message))


def rule_fields(name: str) -> tuple[str, ...]:
    """The fields `classify` gives a message of type `name`, which a fault rule may select on (seqno, conn_id,
    first): what the scenario loader checks a rule's `first` or `drop-range` against."""
    if name.endswith("Data"):
        return ("seqno", "conn_id", "first")
    if name.endswith(("XmitReq", "Stable")) and name.startswith(("Unicast2", "Nakack")):
        return ("seqno", "high") + (("sender",) if name.startswith("Nakack") else ())
    if name in ("Unicast2SendFirstSeqno", "UnicastAck", "NakackMsg", "NakackXmitRsp"):
        return ("seqno",)
    return ()


def type_code(name_or_code: str | int) -> int:
    """The int code of a type name ("Unicast2Stable") or a code itself; KeyError if unknown."""
    if isinstance(name_or_code, int):
        type_name(name_or_code)
        return name_or_code
    if name_or_code not in MESSAGE_TYPES:
        raise KeyError(f"unknown JGroups message type {name_or_code!r}; one of {sorted(MESSAGE_TYPES)}")
    return MESSAGE_TYPES[name_or_code]


def type_name(code: int) -> str:
    """The type name of a code of MESSAGE_TYPES; KeyError if unknown."""
    if code not in NAMES_BY_CODE:
        raise KeyError(f"unknown JGroups message type code {code:#x}")
    return NAMES_BY_CODE[code]
