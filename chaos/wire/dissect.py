"""A scapy dissector of the node wire format (node/wire.py): one `Packet` class per message type.

    SL           magic | version | cluster_id | incarnation | sender_len | sender | count | messages (a list of
                 SLMessage) | tag (only when the version byte has node.wire.SIGNED: the authenticated wire);
                 incarnation 0 (the default of forged datagrams) means "not stated"
    SLMessage    type | len | body, the body dissected by the class bound to its type code

`bind_layers(UDP, SL, dport=DATA_PORT)` (and sport) makes `IP(raw_bytes)` show node traffic in full, in scapy
and in pcap files read by scapy. Used by the shaper for protocol-aware faults, by the injector to forge packets
and by capture. Fixed-size messages get a class generated from their node.wire `FORMAT` and field names
(`SLHeartbeat`, `SLUnicastAck`, ...); the ones with a variable tail (`SLUnicastData`, `SLUnicastXmitReq`) are
written out here; a variable message without a class is shown as raw bytes. The unit tests keep every class in
step with node.wire's codec on the same bytes.

`message_type(name_or_code)` resolves what users type (a class name `UnicastAck`, its snake form `unicast_ack`,
or a code) to a type code; the real JGroups' message types (`Unicast2Stable`: jgnode.wire, codes >= 0x1000)
resolve too, so one `--type` serves both wires.
"""
from __future__ import annotations

import re
import struct
from typing import Any

from scapy.fields import (ByteEnumField, ByteField, ConditionalField, FieldLenField, FieldListField, IntField,
                          LongField, PacketListField, ShortField, StrFixedLenField, StrLenField, XIntField)
from scapy.layers.inet import UDP
from scapy.packet import Packet, Raw, bind_layers

from jgnode import wire as jgwire
from node import wire
from node.auth import TAG_BYTES
from node.errors import UsageError


def _type_names() -> dict[int, str]:
    return {code: cls.__name__ for code, cls in sorted(wire.message_types().items())}


class SLMessage(Packet):
    """One message of a datagram: type, body length, then the body (a per-type layer)."""

    name = "SL message"
    fields_desc = [ByteEnumField("type", 0, _type_names()), ShortField("len", None)]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.len is None:
            pkt = pkt[:1] + struct.pack("!H", len(pay)) + pkt[3:]
        return pkt + pay

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return s[:self.len], s[self.len:]

    def body(self) -> Packet | None:
        """The per-type body layer, or None for an empty body."""
        return self.payload if not isinstance(self.payload, Raw) or self.payload.load else None


class SL(Packet):
    """A splitlab datagram (header and bundled messages, and the tag of a signed one, not checked here)."""

    name = "splitlab"
    fields_desc = [
        StrFixedLenField("magic", wire.MAGIC, 2),
        ByteField("version", wire.VERSION),
        XIntField("cluster_id", 0),
        LongField("incarnation", 0),
        FieldLenField("sender_len", None, length_of="sender", fmt="B"),
        StrLenField("sender", b"", length_from=lambda p: p.sender_len),
        FieldLenField("count", None, count_of="messages", fmt="!H"),
        PacketListField("messages", [], SLMessage, count_from=lambda p: p.count),
        ConditionalField(StrFixedLenField("tag", b"", TAG_BYTES), lambda p: p.version & wire.SIGNED),
    ]


class _Body(Packet):
    """Base of the per-type bodies; a body ends its message (nothing follows it inside the message)."""

    WIRE: type[wire.Message] | None = None
    RENAMES: dict[str, str] = {}  # scapy field name -> node.wire field name, where they must differ

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s


class SLUnicastData(_Body):
    name = "UnicastData"
    WIRE = wire.UnicastData
    RENAMES = {"data": "payload"}  # scapy reserves `payload` for the next layer
    fields_desc = [LongField("seqno", 0), IntField("conn_id", 0), ByteField("first", 0),
                   FieldLenField("payload_len", None, length_of="data", fmt="!I"),
                   StrLenField("data", b"", length_from=lambda p: p.payload_len)]


class SLUnicastXmitReq(_Body):
    name = "UnicastXmitReq"
    WIRE = wire.UnicastXmitReq
    fields_desc = [IntField("conn_id", 0), FieldLenField("count", None, count_of="seqnos", fmt="!H"),
                   FieldListField("seqnos", [], LongField("seqno", 0), count_from=lambda p: p.count)]


_STRUCT_FIELDS = {"Q": LongField, "I": IntField, "B": ByteField, "H": ShortField}


def _generated(code: int, cls: type[wire.Message]) -> type[_Body] | None:
    """A body class built from a fixed-size wire message's FORMAT, or None when it has a variable tail."""
    if cls.encode_body is not wire.Message.encode_body or not set(cls.FORMAT) <= set(_STRUCT_FIELDS):
        return None
    names = wire.field_names(cls)
    if len(names) != len(cls.FORMAT):
        return None
    fields = [_STRUCT_FIELDS[ch](name, 0) for ch, name in zip(cls.FORMAT, names)]
    return type(f"SL{cls.__name__}", (_Body,), {"name": cls.__name__, "WIRE": cls, "fields_desc": fields})


def _bind_all() -> dict[int, type[_Body]]:
    explicit = {c.WIRE.TYPE: c for c in _Body.__subclasses__() if c.WIRE is not None}
    out = {}
    for code, cls in wire.message_types().items():
        body = explicit.get(code) or _generated(code, cls)
        if body is not None:
            bind_layers(SLMessage, body, type=code)
            out[code] = body
            globals().setdefault(body.__name__, body)  # dissect.SLUnicastAck, as if written out
    return out


BODY_CLASSES: dict[int, type[_Body]] = _bind_all()
bind_layers(UDP, SL, dport=wire.DATA_PORT)
bind_layers(UDP, SL, sport=wire.DATA_PORT)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def message_type(name_or_code: str | int) -> int:
    """The wire type code for a class name (`UnicastAck`), its snake form (`unicast_ack`) or a code; also a
    type of the real JGroups' wire (`Unicast2Stable`, jgnode.wire.MESSAGE_TYPES, codes >= 0x1000).

    Raises `UsageError` listing the known types.
    """
    types = wire.message_types()
    if isinstance(name_or_code, int) or str(name_or_code).isdigit():
        code = int(name_or_code)
        if code in types or code in jgwire.NAMES_BY_CODE:
            return code
    else:
        for code, cls in types.items():
            if name_or_code in (cls.__name__, _snake(cls.__name__)):
                return code
        if name_or_code in jgwire.MESSAGE_TYPES:
            return jgwire.MESSAGE_TYPES[name_or_code]
    known = ", ".join(f"{cls.__name__} ({code})" for code, cls in sorted(types.items()))
    raise UsageError(f"unknown message type {name_or_code!r}; known: {known}; of the real JGroups: "
                     f"{', '.join(sorted(jgwire.MESSAGE_TYPES))}")


def is_jgroups(code: int) -> bool:
    """Whether a type code is of the real JGroups' wire (jgnode.wire), not splitlab's."""
    return code in jgwire.NAMES_BY_CODE


def type_name(code: int) -> str:
    if is_jgroups(code):
        return jgwire.NAMES_BY_CODE[code]
    cls = wire.message_types().get(code)
    return cls.__name__ if cls else f"type{code}"


def fields_of(message: SLMessage) -> dict[str, Any]:
    """The body fields of a dissected message under node.wire's names (empty for an empty or undissected body)."""
    body = message.payload
    if isinstance(body, _Body):
        return {body.RENAMES.get(f.name, f.name): getattr(body, f.name) for f in body.fields_desc}
    return {}


def dissect(udp_payload: bytes) -> SL:
    """Dissect one datagram's UDP payload (no validation; node.wire is the judge of well-formedness)."""
    return SL(udp_payload)


def build(cluster_id: int, sender: str, messages: list[Packet]) -> bytes:
    """The bytes of a datagram carrying `messages` (body layers such as `SLUnicastAck(seqno=3)`)."""
    return bytes(SL(cluster_id=cluster_id, sender=sender.encode(), messages=[SLMessage() / m for m in messages]))


def body_class(code: int) -> type[_Body]:
    """The body class of a type code. Raises `UsageError` when there is none."""
    try:
        return BODY_CLASSES[code]
    except KeyError:
        raise UsageError(f"no dissector for message type {code} ({type_name(code)})") from None
