"""The Wireshark dissector generated from the codec's registry (chaos.wire.wireshark): its layouts read every
message type exactly as the codec decodes it, and tshark (Debian's package) with the generated Lua decodes a pcap
of every type, a bundle, a signed datagram and a datagram on another port to the codec's values, shows malformed
datagrams as malformed (never a Lua error), and `splitlab wireshark` prints and installs it."""
from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from scapy.layers.inet import IP, UDP

from chaos.cli.main import main as splitlab
from chaos.wire import wireshark
from chaos.wire.capture import write_pcap
from node import wire
from node.auth import WireKey
from test_property_harness import Edges, message_strategy
from wire_samples import expected, messages_of, pdml_frames, proto, run_tshark, sample

CLUSTER = wire.cluster_id_of("wireshark-test")
TYPES = sorted(wire.message_types().items())
EDGES = Edges(src="n1", names=("n1", "n2", "n3"), seqnos=(1, 7, 2**40), conn_ids=(4096, 8193), view_ns=(1, 3),
              ids=(5,), flags=(0, 1, 0x83))


def fields_of(msg: wire.Message) -> dict[str, Any]:
    return {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}


@pytest.mark.parametrize("code, cls", TYPES, ids=[cls.__name__ for _, cls in TYPES])
def test_every_layout_reads_a_body_as_the_codec_decodes_it(code: int, cls: type[wire.Message]) -> None:
    @settings(max_examples=60, deadline=None)
    @given(message_strategy(cls, EDGES))
    def check(msg: wire.Message) -> None:
        body = wire.encode_message(msg)[3:]
        assert wireshark.read_body(cls, body) == fields_of(cls.decode_body(body))
    check()


def test_a_layout_that_does_not_describe_its_fields_is_refused() -> None:
    @dataclasses.dataclass
    class Odd(wire.Message):
        TYPE = 250
        FORMAT = "QI"
        only: int
    with pytest.raises(ValueError, match="declare a LAYOUT"):
        wire.body_layout(Odd)


def packet(payload: bytes, sport: int = wire.DATA_PORT, dport: int = wire.DATA_PORT) -> bytes:
    return bytes(IP(src="10.9.0.2", dst="10.9.0.3") / UDP(sport=sport, dport=dport) / payload)


def datagram(messages: list[wire.Message], sender: str = "n1", key: WireKey | None = None) -> bytes:
    return wire.encode_datagram(CLUSTER, sender, messages, incarnation=1_700_000_000_123, key=key)


MALFORMED = {
    "truncated header": datagram([wire.Heartbeat(1)])[:10],
    "unknown type": datagram([wire.Heartbeat(1)])[:-11] + bytes([200, 0, 8]) + bytes(8),
    "bad count": datagram([wire.Heartbeat(1)]).replace(b"\x00\x01\x01", b"\x00\x00\x01", 1),
    "body past end": datagram([wire.Heartbeat(1)])[:-1],
    "trailing bytes": datagram([wire.Heartbeat(1)]) + b"\x00\x00",
    "bad flag": datagram([wire.UnicastData(1, 4096, True, b"x")])[:-6] + b"\x07" + datagram(
        [wire.UnicastData(1, 4096, True, b"x")])[-5:],
    "payload length": datagram([wire.Nakack4Msg(1, b"abc")])[:-7] + b"\x00\x00\x00\x09" + b"abc",
}


def tshark(tmp_path: Path, packets: list[bytes], *args: str) -> str:
    """tshark's output for `packets` (a pcap of them) with the generated dissector and `args`."""
    lua = tmp_path / "splitlab.lua"
    lua.write_text(wireshark.lua())
    pcap = tmp_path / "frames.pcap"
    write_pcap(pcap, [(1_700_000_000.0 + i, p) for i, p in enumerate(packets)])
    return run_tshark(lua, pcap, *args)


def tshark_pdml(tmp_path: Path, packets: list[bytes]) -> list[ET.Element]:
    """The frames tshark decodes from `packets`, as PDML <packet> elements."""
    frames = pdml_frames(tshark(tmp_path, packets, "-T", "pdml"))
    assert len(frames) == len(packets)
    return frames


def tshark_info(tmp_path: Path, packets: list[bytes]) -> list[str]:
    """The Info column of each frame."""
    return tshark(tmp_path, packets, "-T", "fields", "-e", "_ws.col.Info").splitlines()


def test_tshark_decodes_every_type_a_bundle_a_signed_datagram_and_another_port(tmp_path) -> None:
    singles = [sample(cls) for _, cls in TYPES]
    bundle = [wire.UnicastData(21, 8192, False, b"abc"), wire.UnicastAck(20, 8192, 9), wire.Heartbeat(4)]
    key = WireKey(b"k" * 32)
    frames = tshark_pdml(tmp_path, [packet(datagram([m])) for m in singles] + [
        packet(datagram(bundle)), packet(datagram([wire.Heartbeat(5)], key=key)),
        packet(datagram([wire.Ping(77)]), sport=40001, dport=40002)])
    for msg, frame in zip(singles, frames):
        assert messages_of(frame) == [expected(msg)]
    assert messages_of(frames[len(singles)]) == [expected(m) for m in bundle]
    assert tshark_info(tmp_path, [packet(datagram(bundle))]) == [
        "UnicastData seqno=21 conn_id=8192 first=0 payload_len=3; UnicastAck seqno=20 conn_id=8192 timestamp=9; "
        "Heartbeat counter=4"]
    signed = proto(frames[len(singles) + 1])
    assert signed.find("field[@name='splitlab.signed']").get("show") == "1"
    assert signed.find("field[@name='splitlab.tag']") is not None
    assert messages_of(frames[len(singles) + 1]) == [expected(wire.Heartbeat(5))]
    assert messages_of(frames[-1]) == [expected(wire.Ping(77))]  # found by the heuristic, not the port
    header = proto(frames[0])
    assert header.find("field[@name='splitlab.sender']").get("show") == "n1"
    assert header.find("field[@name='splitlab.cluster_id']").get("show") == f"{CLUSTER:#010x}"
    assert header.find("field[@name='splitlab.incarnation']").get("show") == "1700000000123"


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_datagram_shows_as_malformed_not_as_a_lua_error(tmp_path, name: str) -> None:
    data = MALFORMED[name]
    with pytest.raises(wire.WireError):
        wire.decode_datagram(data, CLUSTER)  # the codec refuses it too
    (frame,) = tshark_pdml(tmp_path, [packet(data)])
    experts = [f.get("showname", "") for f in frame.iter("field") if f.get("name") == "splitlab.malformed"]
    assert experts, ET.tostring(frame)[:2000]
    (info,) = tshark_info(tmp_path, [packet(data)])
    assert "[Malformed]" in info


def test_splitlab_wireshark_prints_and_installs_the_dissector(tmp_path, capsys) -> None:
    assert splitlab(["wireshark", "lua"]) == 0
    assert capsys.readouterr().out == wireshark.lua()
    assert splitlab(["wireshark", "install", "--dir", str(tmp_path / "plugins")]) == 0
    assert (tmp_path / "plugins" / "splitlab.lua").read_text() == wireshark.lua()
    (tmp_path / "file").write_text("")
    assert splitlab(["wireshark", "install", "--dir", str(tmp_path / "file")]) == 1
