"""The scapy dissector (chaos.wire.dissect) against node.wire's own codec, on the same bytes, both ways."""
import pytest
from scapy.layers.inet import IP, UDP

from chaos.wire import dissect
from node import wire
from node.errors import UsageError

CID = wire.cluster_id_of("run-1")

SAMPLES = [wire.Heartbeat(7), wire.Ping(1 << 40), wire.Pong(3),
           wire.UnicastData(5, 9, True, b"payload\0bytes"), wire.UnicastData(6, 0, False, b""),
           wire.UnicastAck(4, 9, 123), wire.UnicastStable(10, 2), wire.UnicastXmitReq(3, (1, 2, 3)),
           wire.UnicastXmitReq(0, ()), wire.SendFirstSeqno(77), wire.UnicastClose(5), wire.UnicastSync(),
           wire.UnicastSyncOk(100, 6), wire.UnicastSyncAck(6)]


def test_every_registered_wire_type_is_dissected_at_least_by_type():
    """Types with fixed bodies get a generated class; a type with a variable tail and no class here is still
    split by type and length (message rules match its type, not its fields) and rebuilt byte for byte."""
    for code, cls in wire.message_types().items():
        if code in dissect.BODY_CLASSES:
            assert dissect.BODY_CLASSES[code].WIRE is cls
            continue
        head = wire.encode_datagram(CID, "n1", [wire.Heartbeat(1)])[:-11]  # header with count 1
        raw = head + bytes([code]) + b"\x00\x03abc"  # one message of this type with a 3-byte body
        pkt = dissect.dissect(raw)
        assert [m.type for m in pkt.messages] == [code] and bytes(pkt) == raw, cls.__name__


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: m.type_name)
def test_dissects_what_node_wire_encodes(msg):
    data = wire.encode_datagram(CID, "n1", [msg], incarnation=1_763_770_000_123)
    pkt = dissect.dissect(data)
    assert ((pkt.magic, pkt.version, pkt.cluster_id, pkt.incarnation, pkt.sender, pkt.count)
            == (b"SL", wire.VERSION, CID, 1_763_770_000_123, b"n1", 1))
    (message,) = pkt.messages
    assert message.type == msg.TYPE
    fields = dissect.fields_of(message)
    for name in wire.field_names(type(msg)):
        value = getattr(msg, name)
        assert fields[name] == (list(value) if isinstance(value, tuple) else value), name
    assert bytes(pkt) == data  # rebuilt byte for byte


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: m.type_name)
def test_node_wire_decodes_what_scapy_builds(msg):
    body_cls = dissect.body_class(msg.TYPE)
    values = {}
    for f in body_cls.fields_desc:
        wire_name = body_cls.RENAMES.get(f.name, f.name)
        if hasattr(msg, wire_name):
            value = getattr(msg, wire_name)
            values[f.name] = list(value) if isinstance(value, tuple) else value
    data = dissect.build(CID, "n2", [body_cls(**values)])
    assert wire.decode_datagram(data, CID) == ("n2", [msg])


def test_bundles_and_literal_bytes():
    data = wire.encode_datagram(CID, "n3", [wire.Heartbeat(1), wire.UnicastSync(), wire.UnicastAck(2, 3, 4)])
    pkt = dissect.dissect(data)
    assert [m.type for m in pkt.messages] == [1, 22, 17]
    assert bytes(pkt.messages[0]) == b"\x01\x00\x08" + (1).to_bytes(8, "big")
    assert bytes(pkt.messages[1]) == b"\x16\x00\x00"


def test_bound_to_the_data_port_in_ip_udp():
    data = wire.encode_datagram(CID, "n1", [wire.Ping(9)])
    pkt = IP(bytes(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=7100, dport=wire.DATA_PORT) / data))
    assert pkt.haslayer(dissect.SL) and pkt[dissect.SL].messages[0][dissect.SLPing].ping_id == 9


def test_message_type_names():
    assert dissect.message_type("UnicastAck") == 17
    assert dissect.message_type("unicast_ack") == 17
    assert dissect.message_type("1") == 1 and dissect.message_type(3) == 3
    with pytest.raises(UsageError, match="unknown message type 'Ack'; known: Heartbeat \\(1\\)"):
        dissect.message_type("Ack")
