"""Wire format of the membership (4-15) and multicast (48-79) messages: round trips, and malformed bodies raise
WireError (counted and dropped by the receive loop)."""
from __future__ import annotations

import struct

import pytest

from node.errors import WireError
from node.wire import (BcastState, BcastStateReq, Nakack4Ack, Nakack4Highest, Nakack4Msg, Nakack4XmitReq,
                       Nakack4XmitRsp, ViewAck, ViewInfo, ViewMsg, decode_datagram, encode_datagram,
                       encode_message, message_types)

CID = 0xC0FFEE02
MEMBERSHIP = [ViewMsg("n1", 3, True, ("n1", "n2", "n3")), ViewMsg("a", 2**64 - 1, False, ("a",)),
              ViewAck("n1", 3), ViewInfo("n2", 4, "n1", ("n1", "n2")), ViewInfo("x" * 64, 1, "y", tuple("abc"))]
MULTICAST = [Nakack4Msg(1, b"hello"), Nakack4Msg(2**64 - 1, b""), Nakack4XmitReq("n1", (3, 4, 5)),
             Nakack4XmitReq("n2", ()), Nakack4XmitRsp(7, bytes(range(256))), Nakack4Highest(12),
             Nakack4Ack(9, 1), BcastState(6, 2, 1), BcastState(1, 1, 0), BcastStateReq(1)]


def test_types_are_in_their_ranges() -> None:
    types = message_types()
    for msg in MEMBERSHIP:
        assert 4 <= msg.TYPE <= 15 and types[msg.TYPE] is type(msg)
    for msg in MULTICAST:
        assert 48 <= msg.TYPE <= 79 and types[msg.TYPE] is type(msg)


@pytest.mark.parametrize("msg", MEMBERSHIP + MULTICAST, ids=lambda m: type(m).__name__)
def test_round_trip(msg) -> None:
    assert decode_datagram(encode_datagram(CID, "n1", [msg]), CID) == ("n1", [msg])


def test_bundled_round_trip() -> None:
    msgs = MEMBERSHIP + MULTICAST
    assert decode_datagram(encode_datagram(CID, "n3", [encode_message(m) for m in msgs]), CID) == ("n3", msgs)


def _datagram(type_code: int, body: bytes) -> bytes:
    return encode_datagram(CID, "n1", [struct.pack("!BH", type_code, len(body)) + body])


@pytest.mark.parametrize("type_code, body, reason", [
    (4, struct.pack("!QB", 1, 0), "truncated"),                                  # no coordinator name
    (4, struct.pack("!QB", 1, 2) + b"\x01\x01a\x01\x01a", "absurd"),              # merge flag 2
    (4, struct.pack("!QB", 1, 0) + b"\x01\x01a\x01\x05ab", "truncated"),          # member name runs past
    (4, struct.pack("!QB", 1, 0) + b"\x01\x01a\x01\x01ax", "absurd"),             # trailing byte
    (5, struct.pack("!Q", 1) + b"\x02\x01a\x01b", "absurd"),                      # two coordinators
    (6, struct.pack("!Q", 1) + b"\x01\x01a\x00", "absurd"),                       # one head name, not two
    (4, struct.pack("!QB", 1, 0) + b"\x01\x00", "absurd"),                        # empty name
    (48, struct.pack("!QI", 1, 10) + b"abc", "truncated"),
    (48, struct.pack("!QI", 1, 1) + b"abc", "absurd"),
    (49, b"\x01\x01a" + struct.pack("!H", 2) + b"\x00" * 8, "truncated"),
    (49, b"\x01\x01a" + struct.pack("!H", 0) + b"\x00", "absurd"),
    (52, struct.pack("!Q", 1), "truncated"),
    (53, struct.pack("!QQBB", 1, 1, 1, 0), "truncated"),
])
def test_malformed_bodies_raise_wire_error(type_code: int, body: bytes, reason: str) -> None:
    with pytest.raises(WireError) as err:
        decode_datagram(_datagram(type_code, body), CID)
    assert err.value.reason == reason
