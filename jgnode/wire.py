"""A sans-IO codec of JGroups 2.12.2's UDP datagrams (and of single messages): bytes in, `JgDatagram` out, and back.

Its one job: let the fault injector, the capture dissector and the sequence diagram read (and forge) the wire of
the real JGroups 2.12.2 (Debian bookworm's libjgroups-java) as it follows each UDP datagram. No I/O, no scapy:
`struct` only. Every byte follows the code of the tag `JGroups_2_12_2_Final`:

    datagram   TP.writeMessage / TP.writeMessageList / TP.IncomingPacket.run (the receive path), Version
    message    Message.writeTo / writeToNoAddrs / readFrom, util.Headers
    addresses  Util.writeAddress / readAddress, util.UUID.writeTo, stack.IpAddress.writeTo
    headers    UNICAST$UnicastHeader, UNICAST2$Unicast2Header, pbcast.NakAckHeader (util.Range),
               pbcast.STABLE$StableHeader and pbcast.GMS$GmsHeader (util.Digest, View, MergeView, ViewId,
               pbcast.JoinRsp, util.MergeId), PingHeader (PingData), VERIFY_SUSPECT$VerifyHeader,
               FD_ALL$HeartbeatHeader, FD$FdHeader, FD_SOCK$FdHeader, FragHeader (FRAG2), FcHeader (UFC, MFC, FC),
               TpHeader (the transport's cluster name)
    ids        conf/jg-protocol-ids.xml (PROTOCOL_IDS) and conf/jg-magic-map.xml (MAGIC_NUMBERS)

The wire, all integers big-endian (java.io.DataOutputStream):

    datagram  version u16 (2.12.2 = 0x1302) | flags u8 (LIST 1, MULTICAST 2, OOB 4) | then either
              one message, or (LIST, a bundle) dest address | src address | (presence u8=1 | message)* | 0
    message   leading u8 (DEST_SET 1, SRC_SET 2, BUF_SET 4) | flags u8 | [dest] | [src] | [len i32 | buffer]
              | header count i16 | (protocol id i16 | magic i16 | header body)*
              In a bundle a message carries no dest (the bundle's) and its src only when it differs from the
              bundle's.
    address   flags u8 (NULL 1, UUID 2, IP 4) | UUID: lsb i64, msb i64, extra u8 [len u16, bytes]
              | IpAddress: len u8 (4 or 16), ip, [scope i32 (IPv6)], port u16, extra u8 [len u16, bytes]

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

from node.errors import WireError

# ------------------------------------------------------------------------------------------------ constants

VERSION_MAJOR_SHIFT = 11
VERSION_MINOR_SHIFT = 6
VERSION_MAJOR_MASK = 0xF800
VERSION_MINOR_MASK = 0x07C0
VERSION_MICRO_MASK = 0x003F


def encode_version(major: int, minor: int, micro: int) -> int:
    """Version.encode: 5 bits major, 5 bits minor, 6 bits micro."""
    return (major << VERSION_MAJOR_SHIFT) | (minor << VERSION_MINOR_SHIFT) | micro


def version_text(version: int) -> str:
    """Version.print: "2.12.2" for 0x1302."""
    major = (version & VERSION_MAJOR_MASK) >> VERSION_MAJOR_SHIFT
    minor = (version & VERSION_MINOR_MASK) >> VERSION_MINOR_SHIFT
    return f"{major}.{minor}.{version & VERSION_MICRO_MASK}"


VERSION = encode_version(2, 12, 2)  # 0x1302
COMPATIBLE_MAJOR_MINOR = (2, 12)  # Version.isBinaryCompatible: same major and minor

# TP's datagram flags (TP.LIST, TP.MULTICAST, TP.OOB)
TP_LIST = 0x01
TP_MULTICAST = 0x02
TP_OOB = 0x04
_TP_FLAGS_ALL = TP_LIST | TP_MULTICAST | TP_OOB

# Message's leading byte
DEST_SET = 0x01
SRC_SET = 0x02
BUF_SET = 0x04
_LEADING_ALL = DEST_SET | SRC_SET | BUF_SET

# Message flags (Message.OOB, ...)
MESSAGE_FLAGS = {0x01: "OOB", 0x02: "DONT_BUNDLE", 0x04: "NO_FC", 0x08: "SCOPED", 0x10: "NO_RELIABILITY",
                 0x20: "NO_TOTAL_ORDER", 0x40: "NO_RELAY"}
OOB = 0x01

# Address flags (Address.NULL, UUID_ADDR, IP_ADDR)
ADDR_NULL = 0x01
ADDR_UUID = 0x02
ADDR_IP = 0x04

IPV4_LEN_BYTES = 4
IPV6_LEN_BYTES = 16
MAX_VIEW_NESTING = 8  # MergeView subgroups within subgroups: deeper is not something JGroups writes

# conf/jg-protocol-ids.xml of JGroups_2_12_2_Final, class simple names (as Headers.printHeaders prints them)
PROTOCOL_IDS: dict[int, str] = {
    2: "FD", 3: "FD_SOCK", 4: "FRAG", 5: "FRAG2", 6: "PING", 7: "MPING", 8: "S3_PING", 9: "FILE_PING",
    10: "TCPPING", 11: "TCPGOSSIP", 12: "UNICAST", 13: "VERIFY_SUSPECT", 14: "GMS", 15: "NAKACK", 16: "STABLE",
    17: "STATE_TRANSFER", 18: "SMACK", 19: "COMPRESS", 20: "FC", 21: "UDP", 22: "TCP", 23: "TCP_NIO",
    24: "TUNNEL", 25: "ENCRYPT", 26: "SEQUENCER", 27: "FD_SIMPLE", 28: "VIEW_SYNC", 29: "FD_ALL", 30: "SFC",
    31: "FLUSH", 32: "STREAMING_STATE_TRANSFER", 33: "AUTH", 34: "MERGE3", 35: "MERGEFAST", 36: "HTOTAL",
    37: "DISCARD", 38: "LOOPBACK", 39: "SHARED_LOOPBACK", 40: "UNICAST2", 41: "SCOPE", 42: "DAISYCHAIN",
    43: "RELAY", 44: "MFC", 45: "UFC", 46: "JDBC_PING", 47: "STOMP", 48: "PRIO", 49: "BPING", 50: "CENTRAL_LOCK",
    51: "PEER_LOCK", 52: "CENTRAL_EXECUTOR",
    200: "PullPushAdapter", 201: "RequestCorrelator", 202: "MuxChannel", 203: "Multiplexer",
    204: "MuxRequestCorrelator",
}
PROTOCOL_UNICAST = 12
PROTOCOL_UNICAST2 = 40
PROTOCOL_NAKACK = 15
PROTOCOL_UDP = 21
PROTOCOL_FD_ALL = 29
PROTOCOL_STABLE = 16
PROTOCOL_FC = 20
PROTOCOL_MFC = 44
PROTOCOL_UFC = 45

# conf/jg-magic-map.xml of JGroups_2_12_2_Final (org.jgroups. left out)
MAGIC_NUMBERS: dict[int, str] = {
    1: "stack.IpAddress", 3: "protocols.FD$FdHeader", 6: "protocols.FD_SOCK$FdHeader", 7: "protocols.FragHeader",
    13: "protocols.PingHeader", 21: "protocols.UNICAST$UnicastHeader", 22: "protocols.VERIFY_SUSPECT$VerifyHeader",
    24: "protocols.pbcast.GMS$GmsHeader", 25: "protocols.pbcast.NakAckHeader",
    27: "protocols.pbcast.STABLE$StableHeader", 28: "protocols.pbcast.STATE_TRANSFER$StateHeader",
    29: "protocols.SMACK$SmackHeader", 30: "Message", 31: "View", 32: "ViewId", 34: "Address",
    36: "protocols.PingData", 38: "java.util.Vector", 39: "protocols.pbcast.JoinRsp", 40: "util.Digest",
    41: "java.util.Hashtable", 53: "protocols.COMPRESS$CompressHeader", 54: "protocols.FcHeader",
    56: "protocols.TpHeader", 57: "protocols.ENCRYPT$EncryptHeader", 58: "protocols.SEQUENCER$SequencerHeader",
    59: "protocols.FD_SIMPLE$FdHeader", 60: "protocols.VIEW_SYNC$ViewSyncHeader",
    61: "protocols.FD_ALL$HeartbeatHeader", 62: "protocols.SFC$Header", 63: "mux.MuxHeader",
    64: "protocols.pbcast.FLUSH$FlushHeader", 65: "protocols.pbcast.STREAMING_STATE_TRANSFER$StateHeader",
    66: "blocks.PullPushAdapter$PullHeader", 67: "protocols.AuthHeader", 68: "util.UUID",
    69: "protocols.MERGE3$CoordAnnouncement", 70: "protocols.MERGEFAST$MergefastHeader",
    71: "blocks.RequestCorrelator$Header", 72: "blocks.RequestCorrelator$MultiDestinationHeader",
    73: "protocols.UNICAST2$Unicast2Header", 74: "protocols.SCOPE$ScopeHeader", 75: "blocks.mux.MuxHeader",
    76: "protocols.DAISYCHAIN$DaisyHeader", 77: "protocols.RELAY$RelayHeader", 78: "protocols.STOMP$StompHeader",
    80: "protocols.PrioHeader", 81: "protocols.Locking$LockingHeader", 82: "util.PayloadUUID",
    83: "util.AdditionalDataUUID", 84: "util.TopologyUUID", 85: "protocols.Executing$ExecutorHeader",
    86: "protocols.Executing$Request", 87: "blocks.executor.ExecutionService$RunnableAdapter",
    88: "blocks.executor.Executions$StreamableCallable",
}
MAGIC_FD = 3
MAGIC_FD_SOCK = 6
MAGIC_FRAG = 7
MAGIC_PING = 13
MAGIC_UNICAST = 21
MAGIC_VERIFY_SUSPECT = 22
MAGIC_GMS = 24
MAGIC_NAKACK = 25
MAGIC_STABLE = 27
MAGIC_FC = 54
MAGIC_TP = 56
MAGIC_FD_ALL = 61
MAGIC_UNICAST2 = 73

# header type bytes -> names, as each header's type2Str prints them
UNICAST_KINDS = {0: "DATA", 1: "ACK", 2: "SEND_FIRST_SEQNO"}
UNICAST2_KINDS = {0: "DATA", 1: "XMIT_REQ", 2: "SEND_FIRST_SEQNO", 3: "STABLE"}
NAKACK_KINDS = {1: "MSG", 2: "XMIT_REQ", 3: "XMIT_RSP"}
STABLE_KINDS = {1: "STABLE_GOSSIP", 2: "STABILITY"}
GMS_KINDS = {1: "JOIN_REQ", 2: "JOIN_RSP", 3: "LEAVE_REQ", 4: "LEAVE_RSP", 5: "VIEW", 6: "MERGE_REQ",
             7: "MERGE_RSP", 8: "INSTALL_MERGE_VIEW", 9: "CANCEL_MERGE", 10: "VIEW_ACK",
             11: "JOIN_REQ_WITH_STATE_TRANSFER", 12: "INSTALL_MERGE_VIEW_OK", 13: "GET_DIGEST_REQ",
             14: "GET_DIGEST_RSP", 15: "INSTALL_DIGEST"}
PING_KINDS = {1: "GET_MBRS_REQ", 2: "GET_MBRS_RSP"}
VERIFY_SUSPECT_KINDS = {1: "ARE_YOU_DEAD", 2: "I_AM_NOT_DEAD"}
FD_KINDS = {0: "HEARTBEAT", 1: "HEARTBEAT_ACK", 2: "SUSPECT"}
FD_SOCK_KINDS = {10: "SUSPECT", 11: "WHO_HAS_SOCK", 12: "I_HAVE_SOCK", 13: "GET_CACHE", 14: "GET_CACHE_RSP"}
FC_KINDS = {1: "REPLENISH", 2: "CREDIT_REQUEST"}


def _kind(kinds: dict[int, str], code: int) -> str:
    return kinds.get(code, f"UNKNOWN_{code}")


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

class _Reader:
    """A cursor over the datagram: DataInputStream's reads, raising WireError("truncated") at the end."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def take(self, size_bytes: int, what: str) -> bytes:
        if size_bytes < 0:
            raise WireError("absurd", f"{what}: negative length {size_bytes} at offset {self.pos}")
        end = self.pos + size_bytes
        if end > len(self.data):
            raise WireError("truncated", f"{what}: needs {size_bytes} bytes at offset {self.pos}, "
                                         f"{len(self.data) - self.pos} left")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def _unpack(self, fmt: struct.Struct, what: str) -> Any:
        return fmt.unpack(self.take(fmt.size, what))[0]

    def u8(self, what: str) -> int:
        return self._unpack(_U8, what)

    def i8(self, what: str) -> int:
        return self._unpack(_I8, what)

    def boolean(self, what: str) -> bool:
        """DataInputStream.readBoolean: any byte but 0 is true."""
        return self.u8(what) != 0

    def i16(self, what: str) -> int:
        return self._unpack(_I16, what)

    def u16(self, what: str) -> int:
        return self._unpack(_U16, what)

    def i32(self, what: str) -> int:
        return self._unpack(_I32, what)

    def i64(self, what: str) -> int:
        return self._unpack(_I64, what)

    def u64(self, what: str) -> int:
        return self._unpack(_U64, what)

    def utf(self, what: str) -> str:
        """DataInputStream.readUTF: u16 length and modified UTF-8."""
        return _decode_modified_utf8(self.take(self.u16(what), what), what)


_U8, _I8 = struct.Struct("!B"), struct.Struct("!b")
_I16, _U16 = struct.Struct("!h"), struct.Struct("!H")
_I32 = struct.Struct("!i")
_I64, _U64 = struct.Struct("!q"), struct.Struct("!Q")


def _decode_modified_utf8(raw: bytes, what: str) -> str:
    """Java's modified UTF-8 (1 to 3 bytes per UTF-16 unit, NUL as C0 80) as DataInputStream.readUTF reads it."""
    units: list[int] = []
    i, n = 0, len(raw)
    while i < n:
        b0 = raw[i]
        if b0 < 0x80:
            units.append(b0)
            i += 1
        elif b0 & 0xE0 == 0xC0 and i + 1 < n and raw[i + 1] & 0xC0 == 0x80:
            units.append(((b0 & 0x1F) << 6) | (raw[i + 1] & 0x3F))
            i += 2
        elif b0 & 0xF0 == 0xE0 and i + 2 < n and raw[i + 1] & 0xC0 == 0x80 and raw[i + 2] & 0xC0 == 0x80:
            units.append(((b0 & 0x0F) << 12) | ((raw[i + 1] & 0x3F) << 6) | (raw[i + 2] & 0x3F))
            i += 3
        else:
            raise WireError("bad-string", f"{what}: malformed modified UTF-8 at byte {i} of {n}")
    return struct.pack(f"!{len(units)}H", *units).decode("utf-16-be", "surrogatepass")


def _read_address(r: _Reader, what: str) -> JgAddress:
    """Util.readAddress: NULL, else UUID, else IpAddress, by the flag bits in that order."""
    flags = r.u8(f"{what} address flags")
    if flags & ADDR_NULL:
        return None
    if flags & ADDR_UUID:
        return _read_uuid(r, what)
    if flags & ADDR_IP:
        return _read_ip_address(r, what)
    raise WireError("unknown-address-type",
                    f"{what}: address flags 0x{flags:02x} name a class by magic number (PayloadUUID, "
                    f"TopologyUUID, ...): not decoded")


def _read_extra(r: _Reader, what: str) -> bytes | None:
    """The additional_data tail of UUID and IpAddress: a boolean, then u16 length and bytes."""
    if not r.boolean(f"{what} additional_data presence"):
        return None
    return r.take(r.u16(f"{what} additional_data length"), f"{what} additional_data")


def _read_uuid(r: _Reader, what: str) -> JgUUID:
    lsb = r.u64(f"{what} UUID lsb")  # UUID.writeTo writes the least significant half first
    msb = r.u64(f"{what} UUID msb")
    return JgUUID(msb, lsb, _read_extra(r, what))


def _read_ip_address(r: _Reader, what: str) -> JgIpAddress:
    ip_len = r.i8(f"{what} IP length")
    if ip_len not in (IPV4_LEN_BYTES, IPV6_LEN_BYTES):
        raise WireError("absurd", f"{what}: IP address of {ip_len} bytes (IpAddress.readFrom takes 4 or 16)")
    raw_ip = r.take(ip_len, f"{what} IP")
    scope_id = None
    if ip_len == IPV4_LEN_BYTES:
        text = str(ipaddress.IPv4Address(raw_ip))
    else:
        scope_id = r.i32(f"{what} IPv6 scope id")
        groups = struct.unpack("!8H", raw_ip)
        text = ":".join(f"{g:x}" for g in groups) + (f"%{scope_id}" if scope_id else "")
    port = r.u16(f"{what} port")
    return JgIpAddress(text, port, scope_id, _read_extra(r, what))


def _read_addresses(r: _Reader, what: str) -> tuple[JgAddress, ...] | None:
    """Util.readAddresses: i16 count (negative: null), then addresses."""
    count = r.i16(f"{what} count")
    if count < 0:
        return None
    return tuple(_read_address(r, f"{what}[{i}]") for i in range(count))


def _read_string(r: _Reader, what: str) -> str | None:
    """Util.readString: a byte 1 then writeUTF, anything else null."""
    if r.u8(f"{what} presence") != 1:
        return None
    return r.utf(what)


def _read_view_id(r: _Reader, what: str) -> JgViewId:
    coord = _read_address(r, f"{what} coordinator")
    return JgViewId(coord, r.i64(f"{what} number"))


def _read_optional_view_id(r: _Reader, what: str) -> JgViewId | None:
    """Util.readViewId: a boolean, then a ViewId."""
    return _read_view_id(r, what) if r.boolean(f"{what} presence") else None


def _read_view(r: _Reader, merge: bool, depth: int, what: str) -> JgView:
    """View.readFrom (and MergeView.readFrom when `merge`: the view, then i16 count of subgroups, each a boolean
    (merge view or not) and a view)."""
    if depth > MAX_VIEW_NESTING:
        raise WireError("absurd", f"{what}: merge views nested more than {MAX_VIEW_NESTING} deep")
    view_id = _read_view_id(r, f"{what} view id") if r.boolean(f"{what} view id presence") else None
    members = _read_addresses(r, f"{what} members")
    payload_len = r.i16(f"{what} payload length")
    payload = r.take(payload_len, f"{what} payload") if payload_len > 0 else b""
    subgroups = None
    if merge:
        count = r.i16(f"{what} subgroup count")
        subgroups = tuple(_read_view(r, r.boolean(f"{what} subgroup {i} is merge view"), depth + 1,
                                     f"{what} subgroup {i}")
                          for i in range(max(count, 0)))
    return JgView(view_id, members, payload, subgroups)


def _read_optional_view(r: _Reader, what: str) -> JgView | None:
    """Util.readView: a boolean presence, a boolean (merge view), then the view."""
    if not r.boolean(f"{what} presence"):
        return None
    return _read_view(r, r.boolean(f"{what} is merge view"), 0, what)


def _read_streamable(r: _Reader, reader: Callable[[_Reader, str], Any], what: str) -> Any:
    """Util.readStreamable: a boolean presence, then the object."""
    return reader(r, what) if r.boolean(f"{what} presence") else None


def _read_digest(r: _Reader, what: str) -> tuple[JgDigestEntry, ...]:
    """Digest.readFrom: i16 count, then per member an address and three longs."""
    count = r.i16(f"{what} count")
    if count < 0:
        raise WireError("absurd", f"{what}: negative member count {count}")
    entries = []
    for i in range(count):
        member = _read_address(r, f"{what}[{i}]")
        entries.append(JgDigestEntry(member, r.i64(f"{what}[{i}] low"), r.i64(f"{what}[{i}] highest delivered"),
                                     r.i64(f"{what}[{i}] highest received")))
    return tuple(entries)


def _read_plain_view(r: _Reader, what: str) -> JgView:
    return _read_view(r, False, 0, what)


def _read_merge_view(r: _Reader, what: str) -> JgView:
    return _read_view(r, True, 0, what)


# ------------------------------------------------------------------------------------------------ header bodies
# Each reads one header body and returns (kind, fields), mirroring the header class's readFrom.

def _unicast_body(r: _Reader) -> tuple[str, dict[str, Any]]:
    """UNICAST$UnicastHeader: type; DATA: seqno i64, conn_id i16, first; ACK: seqno; SEND_FIRST_SEQNO: nothing."""
    kind = _kind(UNICAST_KINDS, r.i8("UnicastHeader type"))
    if kind == "DATA":
        return kind, {"seqno": r.i64("seqno"), "conn_id": r.i16("conn_id"), "first": r.boolean("first")}
    if kind == "ACK":
        return kind, {"seqno": r.i64("seqno")}
    return kind, {}


def _unicast2_body(r: _Reader) -> tuple[str, dict[str, Any]]:
    """UNICAST2$Unicast2Header: type; DATA: seqno i64, conn_id i16, first; XMIT_REQ and STABLE: seqno, high_seqno
    (no conn_id); SEND_FIRST_SEQNO: seqno."""
    kind = _kind(UNICAST2_KINDS, r.i8("Unicast2Header type"))
    if kind == "DATA":
        return kind, {"seqno": r.i64("seqno"), "conn_id": r.i16("conn_id"), "first": r.boolean("first")}
    if kind in ("XMIT_REQ", "STABLE"):
        return kind, {"seqno": r.i64("seqno"), "high_seqno": r.i64("high_seqno")}
    if kind == "SEND_FIRST_SEQNO":
        return kind, {"seqno": r.i64("seqno")}
    return kind, {}


def _range(r: _Reader, what: str) -> tuple[int, int]:
    return r.i64(f"{what} low"), r.i64(f"{what} high")


def _nakack_body(r: _Reader) -> tuple[str, dict[str, Any]]:
    """pbcast.NakAckHeader: type; MSG and XMIT_RSP: seqno; XMIT_REQ: Range (presence, low, high) and the
    original sender."""
    kind = _kind(NAKACK_KINDS, r.i8("NakAckHeader type"))
    if kind in ("MSG", "XMIT_RSP"):
        return kind, {"seqno": r.i64("seqno")}
    if kind == "XMIT_REQ":
        return kind, {"range": _read_streamable(r, _range, "range"), "sender": _read_address(r, "sender")}
    return kind, {}


def _stable_body(r: _Reader) -> tuple[str, dict[str, Any]]:
    """pbcast.STABLE$StableHeader: type i32, then the Digest as a streamable."""
    kind = _kind(STABLE_KINDS, r.i32("StableHeader type"))
    return kind, {"digest": _read_streamable(r, _read_digest, "stable digest")}


def _join_rsp(r: _Reader, what: str) -> dict[str, Any]:
    """pbcast.JoinRsp: view, digest (both streamables), fail_reason (Util string)."""
    return {"view": _read_streamable(r, _read_plain_view, f"{what} view"),
            "digest": _read_streamable(r, _read_digest, f"{what} digest"),
            "fail_reason": _read_string(r, f"{what} fail_reason")}


def _merge_id(r: _Reader, what: str) -> tuple[JgAddress, int]:
    """util.MergeId: initiator address, id i32."""
    return _read_address(r, f"{what} initiator"), r.i32(f"{what} id")


def _gms_body(r: _Reader) -> tuple[str, dict[str, Any]]:
    """pbcast.GMS$GmsHeader: every field, always (type, merge-view flag, view, mbr, mbrs, join_rsp, my_digest,
    merge_id, merge_rejected, useFlushIfPresent)."""
    kind = _kind(GMS_KINDS, r.i8("GmsHeader type"))
    is_merge_view = r.boolean("GmsHeader merge view flag")
    view = _read_streamable(r, _read_merge_view if is_merge_view else _read_plain_view, "GmsHeader view")
    return kind, {
        "view": view,
        "mbr": _read_address(r, "GmsHeader mbr"),
        "mbrs": _read_addresses(r, "GmsHeader mbrs"),
        "join_rsp": _read_streamable(r, _join_rsp, "GmsHeader join_rsp"),
        "my_digest": _read_streamable(r, _read_digest, "GmsHeader my_digest"),
        "merge_id": _read_streamable(r, _merge_id, "GmsHeader merge_id"),
        "merge_rejected": r.boolean("GmsHeader merge_rejected"),
        "useFlushIfPresent": r.boolean("GmsHeader useFlushIfPresent"),
    }


def _ping_data(r: _Reader, what: str) -> dict[str, Any]:
    """PingData: own_addr, view (Util.readView), view_id (Util.readViewId), is_server, logical_name,
    physical_addrs."""
    return {"own_addr": _read_address(r, f"{what} own_addr"),
            "view": _read_optional_view(r, f"{what} view"),
            "view_id": _read_optional_view_id(r, f"{what} view_id"),
            "is_server": r.boolean(f"{what} is_server"),
            "logical_name": _read_string(r, f"{what} logical_name"),
            "physical_addrs": _read_addresses(r, f"{what} physical_addrs")}


def _ping_body(r: _Reader) -> tuple[str, dict[str, Any]]:
    """PingHeader (PING, TCPPING, ...): type, PingData (streamable), cluster_name, view_id (set by MERGE2's
    merge-triggered discovery)."""
    kind = _kind(PING_KINDS, r.i8("PingHeader type"))
    return kind, {"data": _read_streamable(r, _ping_data, "PingData"),
                  "cluster_name": _read_string(r, "cluster_name"),
                  "view_id": _read_optional_view_id(r, "PingHeader view_id")}


def _verify_suspect_body(r: _Reader) -> tuple[str, dict[str, Any]]:
    """VERIFY_SUSPECT$VerifyHeader: type i16, from."""
    kind = _kind(VERIFY_SUSPECT_KINDS, r.i16("VerifyHeader type"))
    return kind, {"from": _read_address(r, "VerifyHeader from")}


def _fd_all_body(r: _Reader) -> tuple[str, dict[str, Any]]:
    """FD_ALL$HeartbeatHeader: an empty body."""
    return "HEARTBEAT", {}


def _fd_body(r: _Reader) -> tuple[str, dict[str, Any]]:
    """FD$FdHeader: type, mbrs (Util.writeAddresses), from."""
    kind = _kind(FD_KINDS, r.i8("FdHeader type"))
    return kind, {"mbrs": _read_addresses(r, "FdHeader mbrs"), "from": _read_address(r, "FdHeader from")}


def _fd_sock_ip(r: _Reader, what: str) -> JgIpAddress:
    return _read_ip_address(r, what)


def _fd_sock_body(r: _Reader) -> tuple[str, dict[str, Any]]:
    """FD_SOCK$FdHeader: type, mbr, sock_addr (streamable IpAddress), cachedAddrs (i32 count, then pairs of an
    address and a streamable IpAddress), mbrs (i32 count, then addresses)."""
    kind = _kind(FD_SOCK_KINDS, r.i8("FD_SOCK header type"))
    mbr = _read_address(r, "FD_SOCK mbr")
    sock_addr = _read_streamable(r, _fd_sock_ip, "FD_SOCK sock_addr")
    cached = []
    for i in range(r.i32("FD_SOCK cachedAddrs count")):
        key = _read_address(r, f"FD_SOCK cachedAddrs[{i}]")
        cached.append((key, _read_streamable(r, _fd_sock_ip, f"FD_SOCK cachedAddrs[{i}] value")))
    mbrs = tuple(_read_address(r, f"FD_SOCK mbrs[{i}]") for i in range(r.i32("FD_SOCK mbrs count")))
    # as readFrom leaves them: a count of 0 (or less) is null
    return kind, {"mbr": mbr, "sock_addr": sock_addr, "cachedAddrs": tuple(cached) or None, "mbrs": mbrs or None}


def _frag_body(r: _Reader) -> tuple[str, dict[str, Any]]:
    """FragHeader (FRAG2): id i64, frag_id i32, num_frags i32."""
    return "FRAG", {"id": r.i64("FragHeader id"), "frag_id": r.i32("frag_id"), "num_frags": r.i32("num_frags")}


def _fc_body(r: _Reader) -> tuple[str, dict[str, Any]]:
    """FcHeader (UFC, MFC, FC): type."""
    return _kind(FC_KINDS, r.i8("FcHeader type")), {}


def _tp_body(r: _Reader) -> tuple[str, dict[str, Any]]:
    """TpHeader: channel_name (writeUTF): the cluster name the receiving transport matches."""
    return "TP", {"channel_name": r.utf("TpHeader channel_name")}


_BODY_READERS: dict[int, Callable[[_Reader], tuple[str, dict[str, Any]]]] = {
    MAGIC_UNICAST: _unicast_body, MAGIC_UNICAST2: _unicast2_body, MAGIC_NAKACK: _nakack_body,
    MAGIC_STABLE: _stable_body, MAGIC_GMS: _gms_body, MAGIC_PING: _ping_body,
    MAGIC_VERIFY_SUSPECT: _verify_suspect_body, MAGIC_FD_ALL: _fd_all_body, MAGIC_FD: _fd_body,
    MAGIC_FD_SOCK: _fd_sock_body, MAGIC_FRAG: _frag_body, MAGIC_FC: _fc_body, MAGIC_TP: _tp_body,
}
DECODED_MAGICS = frozenset(_BODY_READERS)


# ------------------------------------------------------------------------------------------------ decoding

class _Partial(Exception):
    """Internal: a header whose body cannot be decoded; carries the headers read so far."""

    def __init__(self, reason: str, headers: tuple[JgHeader, ...]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.headers = headers


def _read_headers(r: _Reader) -> tuple[JgHeader, ...]:
    count = r.i16("header count")
    if count < 0:
        raise WireError("absurd", f"negative header count {count}")
    headers: list[JgHeader] = []
    for i in range(count):
        proto_id = r.i16(f"header {i} protocol id")
        magic = r.i16(f"header {i} magic number")
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


def _read_message(r: _Reader, bundle: tuple[JgAddress, JgAddress] | None) -> JgMessage:
    """Message.readFrom; `bundle` is (dest, src) of a LIST, which set the message's dest and missing src."""
    start = r.pos
    leading = r.u8("leading byte")
    if leading & ~_LEADING_ALL:
        raise WireError("absurd", f"leading byte 0x{leading:02x} has bits Message.writeTo never sets")
    flags = r.u8("message flags")
    dest = _read_address(r, "dest") if leading & DEST_SET else None
    src = _read_address(r, "src") if leading & SRC_SET else None
    payload = r.take(r.i32("buffer length"), "buffer") if leading & BUF_SET else None
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
    return _read_message(_Reader(bytes(data)), None)


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
    r = _Reader(data)
    version = r.u16("version")
    major_minor = ((version & VERSION_MAJOR_MASK) >> VERSION_MAJOR_SHIFT,
                   (version & VERSION_MINOR_MASK) >> VERSION_MINOR_SHIFT)
    if major_minor != COMPATIBLE_MAJOR_MINOR:
        raise WireError("version", f"version {version_text(version)} (0x{version:04x}) is not binary "
                                   f"compatible with {version_text(VERSION)}")
    flags = r.u8("datagram flags")
    if flags & ~_TP_FLAGS_ALL:
        raise WireError("absurd", f"datagram flags 0x{flags:02x} have bits TP never sets")
    if not flags & TP_LIST:
        message = _read_message(r, None)
        return JgDatagram(version, flags, (message,), partial=message.partial, raw=data)
    list_dest = _read_address(r, "bundle dest")
    list_src = _read_address(r, "bundle src")
    prefix_len = r.pos
    messages: list[JgMessage] = []
    partial = None
    while r.boolean(f"bundle presence byte {len(messages)}"):
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
    r = _Reader(body)
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
