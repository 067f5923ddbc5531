"""Wire format of the unicast messages (types 16-47): round trips, and malformed datagrams raise WireError."""
from __future__ import annotations

import struct

import pytest

from node.errors import WireError
from node.wire import (MAGIC, VERSION, SendFirstSeqno, UnicastAck, UnicastClose, UnicastData, UnicastStable,
                       UnicastSync, UnicastSyncAck, UnicastSyncOk, UnicastXmitReq, decode_datagram,
                       decode_datagram_from, encode_datagram, encode_message, message_types)

CID = 0xC0FFEE01

SAMPLES = [
    UnicastData(1, 7, True, b"hello"),
    UnicastData(2**64 - 1, 0xFFFFFFFF, False, b""),
    UnicastData(25, 0, False, bytes(range(256)) * 10),
    UnicastAck(42, 7, 3),
    UnicastStable(15, 7),
    UnicastXmitReq(7, (12, 13, 14, 15)),
    UnicastXmitReq(0, ()),
    UnicastXmitReq(9, tuple(range(1, UnicastXmitReq.MAX_SEQNOS + 1))),
    SendFirstSeqno(123456),
    UnicastClose(7),
    UnicastSync(),
    UnicastSyncOk(9, 8),
    UnicastSyncAck(8),
]


def test_unicast_types_are_in_their_range_and_registered() -> None:
    types = message_types()
    for cls in {type(m) for m in SAMPLES}:
        assert 16 <= cls.TYPE <= 47
        assert types[cls.TYPE] is cls


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip_one_per_datagram(msg) -> None:
    sender, msgs = decode_datagram(encode_datagram(CID, "a", [msg]), CID)
    assert sender == "a"
    assert msgs == [msg]


def test_round_trip_bundled_and_pre_encoded() -> None:
    small = [m for m in SAMPLES if len(encode_message(m)) < 4000]
    data = encode_datagram(CID, "node-1", [encode_message(m) for m in small])
    assert decode_datagram(data, CID) == ("node-1", small)


def test_data_flag_is_a_bool_after_decoding() -> None:
    (_s, [msg]) = decode_datagram(encode_datagram(CID, "a", [UnicastData(1, 2, True, b"x")]), CID)
    assert msg.first is True


def test_xmit_req_refuses_too_many_seqnos() -> None:
    with pytest.raises(ValueError):
        encode_message(UnicastXmitReq(1, tuple(range(UnicastXmitReq.MAX_SEQNOS + 1))))


def _datagram(mtype: int, body: bytes, sender: bytes = b"a", incarnation: int = 0) -> bytes:
    head = struct.pack("!2sBIQB", MAGIC, VERSION, CID, incarnation, len(sender)) + sender + struct.pack("!H", 1)
    return head + struct.pack("!BH", mtype, len(body)) + body


def _reason(data: bytes) -> str:
    with pytest.raises(WireError) as info:
        decode_datagram(data, CID)
    return info.value.reason


def test_hand_built_datagram_matches_the_codec() -> None:
    body = struct.pack("!QIBI", 5, 9, 1, 3) + b"abc"
    assert decode_datagram(_datagram(16, body), CID) == ("a", [UnicastData(5, 9, True, b"abc")])
    built = _datagram(16, body, incarnation=1_763_770_000_123)
    assert decode_datagram_from(built, CID) == ("a", 1_763_770_000_123, [UnicastData(5, 9, True, b"abc")])
    assert encode_datagram(CID, "a", [UnicastData(5, 9, True, b"abc")], 1_763_770_000_123) == built


@pytest.mark.parametrize("body, reason", [
    (struct.pack("!QIBI", 5, 9, 0, 10) + b"abc", "truncated"),   # payload_len larger than what follows
    (struct.pack("!QIBI", 5, 9, 0, 1) + b"abc", "absurd"),       # payload_len smaller than what follows
    (struct.pack("!QIB", 5, 9, 0), "truncated"),                 # fixed part cut short
    (struct.pack("!QIBI", 5, 9, 2, 0), "absurd"),                # first flag neither 0 nor 1
], ids=["payload-long", "payload-short", "head-cut", "flag"])
def test_data_length_mismatch(body: bytes, reason: str) -> None:
    assert _reason(_datagram(16, body)) == reason


@pytest.mark.parametrize("body, reason", [
    (struct.pack("!IH", 1, 3) + struct.pack("!2Q", 1, 2), "truncated"),   # count says 3, two follow
    (struct.pack("!IH", 1, 1) + struct.pack("!2Q", 1, 2), "absurd"),      # count says 1, two follow
    (struct.pack("!IH", 1, 1) + b"\0" * 7, "truncated"),                   # a seqno cut short
    (struct.pack("!I", 1), "truncated"),                                  # no count
], ids=["count-long", "count-short", "partial-seqno", "no-count"])
def test_xmit_req_list_length_mismatch(body: bytes, reason: str) -> None:
    assert _reason(_datagram(19, body)) == reason


@pytest.mark.parametrize("mtype, body", [
    (17, struct.pack("!QI", 1, 2)),        # ACK without its timestamp
    (18, struct.pack("!Q", 1)),            # STABLE without conn_id
    (23, struct.pack("!QIB", 1, 2, 3)),    # SYNC_OK with a stray byte
    (22, b"\0"),                           # SYNC carries nothing
])
def test_fixed_size_mismatch_is_truncated(mtype: int, body: bytes) -> None:
    assert _reason(_datagram(mtype, body)) == "truncated"


def test_truncated_datagram() -> None:
    data = encode_datagram(CID, "a", [UnicastData(1, 2, True, b"payload")])
    for cut in (1, 5, len(data) - 1):
        assert _reason(data[:cut]) == "truncated"


def test_foreign_magic_and_cluster() -> None:
    data = encode_datagram(CID, "a", [UnicastSyncAck(3)])
    assert _reason(b"XX" + data[2:]) == "foreign"
    with pytest.raises(WireError) as info:
        decode_datagram(data, CID + 1)
    assert info.value.reason == "foreign"
    assert decode_datagram(data, None)[1] == [UnicastSyncAck(3)]


def test_wrong_version() -> None:
    data = bytearray(encode_datagram(CID, "a", [UnicastClose(3)]))
    data[2] = VERSION + 1
    assert _reason(bytes(data)) == "version"


def test_unknown_type_in_the_unicast_range() -> None:
    assert _reason(_datagram(47, b"")) == "unknown-type"


def test_trailing_garbage_after_messages_is_absurd() -> None:
    data = encode_datagram(CID, "a", [UnicastStable(1, 2)]) + b"\0"
    assert _reason(data) == "absurd"
