"""The JGroups 2.12.2 wire, declared once: what the codec (`jgnode.wire`, through `jgnode.reader`) and the
Wireshark dissector (`chaos.wire.wireshark_jgroups`) both read it by, so they cannot drift.

Its one job: say every byte of a UDP datagram of the real JGroups 2.12.2 (Debian bookworm's libjgroups-java) in
the words of `jgnode.grammar`, with the numbers that name things (versions, flags, protocol ids, magic numbers,
header types). Every layout follows the code of the tag `JGroups_2_12_2_Final`:

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

    datagram  DATAGRAM: version u16 (2.12.2 = 0x1302) | flags u8 (LIST 1, MULTICAST 2, OOB 4) | then either
              one message, or (LIST, a bundle) BUNDLE: dest address | src address, then (BUNDLE_MORE u8=1 |
              message)* | 0
    message   MESSAGE: leading u8 (DEST_SET 1, SRC_SET 2, BUF_SET 4) | flags u8 | [dest] | [src] | [len i32 |
              buffer] | HEADER_COUNT i16 | (HEADER: protocol id i16 | magic i16 | header body: HEADERS[magic])*
              In a bundle a message carries no dest (the bundle's) and its src only when it differs from the
              bundle's.
    address   DEFINITIONS["address"]: flags u8 (NULL 1, UUID 2, IP 4) | UUID: lsb i64, msb i64, extra u8
              [len u16, bytes] | IpAddress: len u8 (4 or 16), ip, [scope i32 (IPv6)], port u16, extra u8 [...]

A header body carries no length: a header whose magic number is not in HEADERS makes the rest of its message,
and of a bundle, unreadable (both readers stop there). The loops (a bundle's messages, a message's headers)
and what stops them are the readers' own; everything they read is declared here.
"""
from __future__ import annotations

from jgnode.grammar import Blob, Choice, Fail, Header, Int, List, Opt, Struct, Switch, Use, Utf, When

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
TP_FLAGS_ALL = TP_LIST | TP_MULTICAST | TP_OOB

# Message's leading byte
DEST_SET = 0x01
SRC_SET = 0x02
BUF_SET = 0x04
LEADING_ALL = DEST_SET | SRC_SET | BUF_SET

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

# ------------------------------------------------------------------------------------------------ the layouts

MAX_NESTING = MAX_VIEW_NESTING  # Use(nest=True) levels a reader follows before it calls the bytes absurd

_EXTRA = Opt(Blob("additional_data", "u16"))  # UUID's and IpAddress's tail: a boolean, then u16 length, bytes


def _address(name: str, info: str | None = None) -> Use:
    return Use(name, "address", info=info)


def _addresses(name: str, item: str, info: str | None = None) -> List:
    """Util.writeAddresses: i16 count (negative: null), then addresses."""
    return List(name, "i16", _address(item), negative="null", info=info)


def _view_id(name: str = "view_id", info: str | None = None) -> Opt:
    """Util.writeViewId: a boolean, then a ViewId."""
    return Opt(Use(name, "view_id", info=info))


def _string(name: str, info: str | None = None) -> Opt:
    """Util.writeString: a byte 1 then writeUTF, anything else null."""
    return Opt(Utf(name, info=info), presence="one")


def _view_either(name: str, nest: bool, info: str | None = None) -> Choice:
    """A boolean (a MergeView or not), then the view."""
    return Choice(name, Int("is_merge_view", "bool"), ((True, Use(name, "merge_view", nest=nest)),
                                                         (False, Use(name, "view", nest=nest))), info=info)


_VIEW_FIELDS = (
    _view_id(),
    _addresses("members", "member"),
    Blob("payload", "i16", negative="empty"),  # the Java-serialized map some views carry: skipped by its length
)

DEFINITIONS = {
    # Util.readAddress: NULL, else UUID, else IpAddress, by the flag bits in that order
    "address": Choice("address", Int("flags", "u8"), ((ADDR_NULL, None), (ADDR_UUID, Use("uuid", "uuid")),
                                                      (ADDR_IP, Use("ip", "ip_address"))), match="bit",
                      otherwise=Fail("unknown-address-type", "address flags {tag} name a class by magic number "
                                                             "(PayloadUUID, TopologyUUID, ...): not decoded")),
    # util.UUID.writeTo: the least significant half first
    "uuid": Struct("uuid", (Int("lsb", "u64"), Int("msb", "u64"), _EXTRA), build="uuid", show="@uuid"),
    "ip_address": Struct("ip_address", (
        Int("length", "i8", keep=False, valid=(IPV4_LEN_BYTES, IPV6_LEN_BYTES)),
        Blob("ip", "=length"),
        Switch("length", {IPV6_LEN_BYTES: (Int("scope_id", "i32"),)}),
        Int("port", "u16"),
        _EXTRA), build="ip_address", show="@ip"),
    "view_id": Struct("view_id", (_address("coord"), Int("id", "i64")), build="view_id", show="[{coord}|{id}]"),
    # View.readFrom; MergeView.readFrom adds i16 count of subgroups, each a boolean (merge view or not) and a view
    "view": Struct("view", _VIEW_FIELDS, build="view", show="{view_id} {members}"),
    "merge_view": Struct("merge_view", _VIEW_FIELDS + (
        List("subgroups", "i16", _view_either("subgroup", nest=True), negative="empty"),),
        build="view", show="{view_id} {members} {subgroups}"),
    # Digest.readFrom: i16 count, then per member an address and three longs
    "digest": List("digest", "i16", Struct("entry", (
        _address("member"), Int("low", "i64"), Int("highest_delivered", "i64"), Int("highest_received", "i64")),
        build="digest_entry", show="{member} [{low}|{highest_delivered}|{highest_received}]")),
    # PingData
    "ping_data": Struct("data", (
        _address("own_addr", info="named"),
        Opt(_view_either("view", nest=False)),  # Util.readView: presence, merge flag, view
        _view_id(),
        Int("is_server", "bool"),
        _string("logical_name"),
        _addresses("physical_addrs", "physical_addr"))),
}

DATAGRAM = (Int("version", "u16"), Int("flags", "u8", mask=TP_FLAGS_ALL))
BUNDLE = Struct("bundle", (_address("dest"), _address("src")))
BUNDLE_MORE = Int("more", "bool")  # before each message of a bundle; 0 ends it
MESSAGE = Struct("message", (
    Int("leading", "u8", keep=False, mask=LEADING_ALL),
    Int("flags", "u8"),
    When("leading", DEST_SET, (_address("dest"),)),
    When("leading", SRC_SET, (_address("src"),)),
    When("leading", BUF_SET, (Blob("buffer", "i32"),))))
HEADER_COUNT = Int("header_count", "i16", minimum=0)
HEADER = (Int("proto_id", "i16"), Int("magic", "i16"))  # then the body HEADERS[magic] reads

_SEQNO = Int("seqno", "i64", info="named")
_UNICAST_DATA = (_SEQNO, Int("conn_id", "i16", info="named"), Int("first", "bool", info="flag"))
_RANGE = Struct("range", (Int("low", "i64"), Int("high", "i64")), build="tuple", show="[{low}..{high}]",
                info="bare")
_FD_SOCK_IP = Use("sock_addr", "ip_address", info="named")

HEADERS: dict[int, Header] = {h.magic: h for h in (
    # type; DATA: seqno i64, conn_id i16, first; ACK: seqno; SEND_FIRST_SEQNO: nothing
    Header(MAGIC_UNICAST, "unicast", Int("type", "i8", keep=False), UNICAST_KINDS, (
        Switch("type", {0: _UNICAST_DATA, 1: (_SEQNO,)}),)),
    # type; DATA: seqno, conn_id, first; XMIT_REQ and STABLE: seqno, high_seqno (no conn_id); SEND_FIRST_SEQNO:
    # seqno
    Header(MAGIC_UNICAST2, "unicast2", Int("type", "i8", keep=False), UNICAST2_KINDS, (
        Switch("type", {0: _UNICAST_DATA, 1: (_SEQNO, Int("high_seqno", "i64", info="named")),
                        2: (_SEQNO,), 3: (_SEQNO, Int("high_seqno", "i64", info="named"))}),)),
    # type; MSG and XMIT_RSP: seqno; XMIT_REQ: Range (a streamable: presence, low, high), the original sender
    Header(MAGIC_NAKACK, "nakack", Int("type", "i8", keep=False), NAKACK_KINDS, (
        Switch("type", {1: (_SEQNO,), 3: (_SEQNO,), 2: (Opt(_RANGE), _address("sender"))}),)),
    # type i32, then the Digest as a streamable
    Header(MAGIC_STABLE, "stable", Int("type", "i32", keep=False), STABLE_KINDS, (
        Opt(Use("digest", "digest")),)),
    # every field, always: type, merge-view flag, view, mbr, mbrs, join_rsp, my_digest, merge_id,
    # merge_rejected, useFlushIfPresent
    Header(MAGIC_GMS, "gms", Int("type", "i8", keep=False), GMS_KINDS, (
        Int("is_merge_view", "bool", keep=False),
        Switch("is_merge_view", {True: (Opt(Use("view", "merge_view", info="bare")),),
                                 False: (Opt(Use("view", "view", info="bare")),)}),
        _address("mbr", info="named"),
        _addresses("mbrs", "member"),
        Opt(Struct("join_rsp", (Opt(Use("view", "view")), Opt(Use("digest", "digest")),
                                _string("fail_reason")))),  # pbcast.JoinRsp
        Opt(Use("my_digest", "digest")),
        Opt(Struct("merge_id", (_address("initiator"), Int("id", "i32")), build="tuple",
                   show="{initiator}/{id}", info="named")),  # util.MergeId
        Int("merge_rejected", "bool", info="flag"),
        Int("useFlushIfPresent", "bool"))),
    # PING, TCPPING, ...: type, PingData (streamable), cluster_name, view_id (set by MERGE2's merge-triggered
    # discovery)
    Header(MAGIC_PING, "ping", Int("type", "i8", keep=False), PING_KINDS, (
        Opt(Use("data", "ping_data")),
        _string("cluster_name"),
        _view_id(info="named"))),
    # type i16, from
    Header(MAGIC_VERIFY_SUSPECT, "verify_suspect", Int("type", "i16", keep=False), VERIFY_SUSPECT_KINDS, (
        _address("from", info="named"),)),
    # an empty body
    Header(MAGIC_FD_ALL, "fd_all", "HEARTBEAT"),
    # type, mbrs (Util.writeAddresses), from
    Header(MAGIC_FD, "fd", Int("type", "i8", keep=False), FD_KINDS, (
        _addresses("mbrs", "member"), _address("from", info="named"))),
    # type, mbr, sock_addr (streamable IpAddress), cachedAddrs (i32 count, then pairs of an address and a
    # streamable IpAddress), mbrs (i32 count, then addresses); a count of 0 (or less) leaves either null
    Header(MAGIC_FD_SOCK, "fd_sock", Int("type", "i8", keep=False), FD_SOCK_KINDS, (
        _address("mbr", info="named"),
        Opt(_FD_SOCK_IP),
        List("cachedAddrs", "i32", Struct("cached", (_address("key"), Opt(Use("value", "ip_address"))),
                                          build="tuple", show="{key}={value}"), negative="null", empty_null=True),
        List("mbrs", "i32", _address("member"), negative="null", empty_null=True))),
    # FRAG2: id i64, frag_id i32, num_frags i32
    Header(MAGIC_FRAG, "frag", "FRAG", body=(
        Int("id", "i64", info="named"), Int("frag_id", "i32", info="named"), Int("num_frags", "i32", info="named"))),
    # UFC, MFC, FC: type
    Header(MAGIC_FC, "fc", Int("type", "i8", keep=False), FC_KINDS),
    # channel_name (writeUTF): the cluster name the receiving transport matches
    Header(MAGIC_TP, "tp", "TP", body=(Utf("channel_name"),), quiet=True),
)}
