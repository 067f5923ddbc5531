"""The JGroups 2.12.2 dissector generated from jgnode.layout (chaos.wire.wireshark_jgroups).

tshark (Debian's package) with the generated Lua reads every real captured frame of tests/unit/data/jgroups to
what jgnode.wire decodes, message by message and field by field (the codec is held to JGroups' own reading, the
fixtures' NOTE, by test_jgroups_wire.py; the reliability headers are also compared with the NOTE here), bundles
included; forged datagrams cover what the captures lack (FD, IPv6, additional data, unknown types, a MergeId);
a malformed datagram (every truncation of frames of every header type, bad counts and flags, random mutations)
shows as malformed with the codec's own reason and never as a Lua error; an unknown magic number as undecodable;
JGroups on another port (jgnode's 7100, beside splitlab's own dissector) by the heuristic; and `splitlab
wireshark` prints and installs it. The tshark tests skip only when tshark is missing ('make host-deps').
"""
from __future__ import annotations

import random
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import IP, UDP

from chaos.cli.main import main as splitlab
from chaos.wire import wireshark, wireshark_jgroups
from chaos.wire.capture import write_pcap
from jgnode import layout
from jgnode import wire as jg
from jgnode.grammar import Int, Struct
from node import wire as node_wire
from node.errors import WireError
from test_jgroups_wire import ALL_FRAMES, NOTED, Frame
from wire_samples import TSHARK, pdml_frames, run_tshark

needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed: 'make host-deps' (or apt-get "
                                                          "install -y tshark) installs it")
HEADER_FIELDS = {f"jgroups.{spec.name}": spec for spec in layout.HEADERS.values()}
PORT = wireshark_jgroups.PORTS[0]


def packet(payload: bytes, sport: int = PORT, dport: int = PORT + 1) -> bytes:
    return bytes(IP(src="127.0.0.1", dst="127.0.0.1") / UDP(sport=sport, dport=dport) / payload)


def tshark(tmp_path: Path, packets: list[bytes], *args: str, splitlab_too: bool = False) -> str:
    """tshark's output for a pcap of `packets` with the generated JGroups dissector (and splitlab's)."""
    scripts = [tmp_path / "jgroups.lua"]
    scripts[0].write_text(wireshark_jgroups.lua())
    if splitlab_too:
        scripts.append(tmp_path / "splitlab.lua")
        scripts[1].write_text(wireshark.lua())
    pcap = tmp_path / "frames.pcap"
    write_pcap(pcap, [(1_700_000_000.0 + i, p) for i, p in enumerate(packets)])
    return run_tshark(scripts, pcap, *args)


def tshark_frames(tmp_path: Path, packets: list[bytes], **kw: Any) -> list[ET.Element]:
    frames = pdml_frames(tshark(tmp_path, packets, "-T", "pdml", **kw))
    assert len(frames) == len(packets)
    return frames


def tshark_columns(tmp_path: Path, packets: list[bytes], *fields: str, **kw: Any) -> list[list[str]]:
    """Per frame, the values of `fields` (repeated values joined by \\x1e)."""
    args = ["-T", "fields", "-E", "separator=\t", "-E", "aggregator=\x1e", "-E", "occurrence=a"]
    for f in fields:
        args += ["-e", f]
    lines = tshark(tmp_path, packets, *args, **kw).split("\n")[:len(packets)]
    assert len(lines) == len(packets)
    return [line.split("\t") for line in lines]


# ------------------------------------------------------------------------------------------------ PDML, read back

def root_of(frame: ET.Element) -> ET.Element | None:
    return frame.find("proto[@name='jgroups']")


def kids(elem: ET.Element, name: str | None = None) -> list[ET.Element]:
    return [f for f in elem.findall("field") if name is None or f.get("name") == name]


def kid(elem: ET.Element, name: str) -> ET.Element | None:
    found = kids(elem, name)
    assert len(found) <= 1, (name, [ET.tostring(f)[:200] for f in found])
    return found[0] if found else None


def text(value: Any, name: str = "") -> str:
    """What the dissector shows for a value the codec decoded (the oracle of its texts)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, str, jg.JgUUID, jg.JgIpAddress, jg.JgViewId)):
        return str(value)
    if isinstance(value, bytes):
        return f"{len(value)} bytes"
    if isinstance(value, jg.JgView):
        parts = [text(value.view_id), text(value.members)]
        return " ".join(parts + ([text(value.subgroups)] if value.subgroups is not None else []))
    if isinstance(value, jg.JgDigestEntry):
        return f"{value.member} [{value.low}|{value.highest_delivered}|{value.highest_received}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={text(v, k)}" for k, v in value.items()) + "}"
    if name == "range":
        return f"[{value[0]}..{value[1]}]"
    if name == "merge_id":
        return f"{value[0]}/{value[1]}"
    if name == "cachedAddrs":
        return "[" + ", ".join(f"{text(k)}={text(v)}" for k, v in value) + "]"
    return "[" + ", ".join(text(v) for v in value) + "]"


def shown(elem: ET.Element | None) -> str:
    return "null" if elem is None else elem.get("show", "")


def assert_header(elem: ET.Element, h: jg.JgHeader, where: str) -> None:
    spec = layout.HEADERS[h.magic]
    assert elem.get("name") == f"jgroups.{spec.name}", where
    assert (shown(kid(elem, "jgroups.header.proto_id")), shown(kid(elem, "jgroups.header.magic")), elem.get("show")) \
        == (str(h.proto_id), str(h.magic), h.kind), where
    for name, value in h.fields.items():
        got = kid(elem, f"jgroups.{spec.name}.{name}")
        if value is None:
            assert got is None or got.get("show") == "null", f"{where}: {name}"
        elif isinstance(value, bool):
            assert shown(got) == ("1" if value else "0"), f"{where}: {name}"
        else:
            assert shown(got) == text(value, name), f"{where}: {name}"


def assert_message(elem: ET.Element, m: jg.JgMessage, d: jg.JgDatagram, where: str) -> None:
    assert shown(kid(elem, "jgroups.message.flags")) == str(m.flags), where
    if d.is_list:  # the bundle's dest; the message's own src only when it differs from the bundle's
        assert kid(elem, "jgroups.message.dest") is None, where
        src = kid(elem, "jgroups.message.src")
        assert (shown(src) if src is not None else text(d.list_src)) == text(m.src), where
    else:
        assert (shown(kid(elem, "jgroups.message.dest")), shown(kid(elem, "jgroups.message.src"))) == \
            (text(m.dest), text(m.src)), where
    buffer_len = kid(elem, "jgroups.message.buffer_len")
    assert (None if buffer_len is None else int(shown(buffer_len))) == \
        (None if m.payload is None else len(m.payload)), where
    headers = [f for f in kids(elem) if f.get("name") in HEADER_FIELDS]
    if m.partial is None:
        assert shown(kid(elem, "jgroups.message.header_count")) == str(len(m.headers)), where
    assert len(headers) == len(m.headers), where
    for i, (he, h) in enumerate(zip(headers, m.headers)):
        assert_header(he, h, f"{where} header {i}")


def assert_datagram(frame: ET.Element, d: jg.JgDatagram, where: str) -> list[ET.Element]:
    """The frame decodes to `d`; returns its message elements."""
    root = root_of(frame)
    assert root is not None, where
    assert (shown(kid(root, "jgroups.version")), int(shown(kid(root, "jgroups.flags")), 16)) == \
        (str(d.version), d.flags), where
    if d.is_list:
        bundle = kid(root, "jgroups.bundle")
        assert (shown(kid(bundle, "jgroups.bundle.dest")), shown(kid(bundle, "jgroups.bundle.src"))) == \
            (text(d.list_dest), text(d.list_src)), where
    messages = kids(root, "jgroups.message")
    assert len(messages) == len(d.messages), where
    for i, (me, m) in enumerate(zip(messages, d.messages)):
        assert_message(me, m, d, f"{where} message {i}")
    assert not [f for f in frame.iter("field") if f.get("name") == "jgroups.malformed"], where
    return messages


def entry(m: jg.JgMessage) -> str:
    """The start of a message's Info entry: the protocol and kind of the header classify decides by."""
    ranked = [h for magic in jg.CLASSIFY_ORDER for h in m.headers if h.magic == magic and h.proto_id]
    first = ranked[0] if ranked else m.headers[-1]
    return f"{first.protocol} {first.kind}"


# ------------------------------------------------------------------------------------------------ real frames

@pytest.fixture(scope="module")
def real(tmp_path_factory) -> list[tuple[Frame, jg.JgDatagram, ET.Element, str]]:
    """Every fixture frame, its decoding by the codec, tshark's PDML of it and its Info column."""
    if TSHARK is None:
        pytest.skip("tshark is not installed: 'make host-deps' installs it")
    tmp = tmp_path_factory.mktemp("real")
    packets = [packet(f.data, f.sport, f.dport) for f in ALL_FRAMES]
    frames = tshark_frames(tmp, packets)
    infos = [cols[0] for cols in tshark_columns(tmp, packets, "_ws.col.Info")]
    return [(f, jg.decode_datagram(f.data), frame, info) for f, frame, info in zip(ALL_FRAMES, frames, infos)]


@needs_tshark
def test_every_real_frame_decodes_as_the_codec_decodes_it(real) -> None:
    magics, bundles = set(), 0
    for frame, d, pdml, info in real:
        messages = assert_datagram(pdml, d, str(frame))
        entries = info.split("; ")
        assert len(entries) == len(d.messages), (str(frame), info)
        for e, me, m in zip(entries, messages, d.messages):
            assert e == me.get("show") and e.startswith(entry(m)), (str(frame), e)
        magics |= {h.magic for m in d.messages for h in m.headers}
        bundles += d.is_list and len(d.messages) > 1
    assert magics == set(layout.HEADERS) - {jg.MAGIC_FD}  # FD is not in the fixtures' stacks: forged below
    assert bundles >= 5


@needs_tshark
def test_reliability_headers_read_as_jgroups_read_them(real) -> None:
    """tshark's kind and seqnos against the fixtures' NOTE (JGroups' own reading), not only the codec."""
    noted = {id(f) for f in NOTED}
    compared = 0
    for frame, _, pdml, _ in real:
        if id(frame) not in noted:
            continue
        for me, java in zip(kids(root_of(pdml), "jgroups.message"), frame.note["messages"]):
            for he, jh in zip([f for f in kids(me) if f.get("name") in HEADER_FIELDS], java["headers"]):
                name = he.get("name").split(".")[1]
                if name not in ("unicast", "unicast2", "nakack"):
                    continue
                kinds = {"unicast": jg.UNICAST_KINDS, "unicast2": jg.UNICAST2_KINDS, "nakack": jg.NAKACK_KINDS}
                assert he.get("show") == kinds[name][jh["fields"]["type"]], frame
                if "seqno" in jh["fields"] and kid(he, f"jgroups.{name}.seqno") is not None:
                    assert shown(kid(he, f"jgroups.{name}.seqno")) == str(jh["fields"]["seqno"]), frame
                if jh["fields"].get("range"):
                    r = jh["fields"]["range"]
                    assert shown(kid(he, "jgroups.nakack.range")) == f"[{r['low']}..{r['high']}]", frame
                compared += 1
    assert compared > 500


@needs_tshark
def test_the_info_column_reads_like_the_brief(real) -> None:
    seen = set()
    for _, d, _, info in real:
        for e, m in zip(info.split("; "), d.messages):
            u2, nak, gms = m.header("UNICAST2"), m.header("NAKACK"), m.header("GMS")
            if u2 and u2.kind == "DATA" and u2.fields["first"] and len(m.headers) == 2:  # and the TpHeader
                assert e == f"UNICAST2 DATA seqno={u2.fields['seqno']} conn_id={u2.fields['conn_id']} first"
                seen.add("data")
            if nak and nak.kind == "XMIT_REQ":
                assert e == "NAKACK XMIT_REQ [{}..{}]".format(*nak.fields["range"])
                seen.add("xmit")
            if nak and gms and gms.kind == "VIEW":
                assert e.startswith(f"NAKACK {nak.kind} seqno={nak.fields['seqno']}, GMS VIEW "
                                    f"{gms.fields['view'].view_id} [")
                seen.add("view")
        if d.is_list and len(d.messages) > 2:
            assert len(info.split("; ")) == len(d.messages)
            seen.add("bundle")
    assert seen == {"data", "xmit", "view", "bundle"}


@needs_tshark
def test_a_display_filter_on_a_field_selects_what_the_codec_says(tmp_path) -> None:
    """README: `tshark -Y 'jgroups.unicast2.seqno > 20'`."""
    packets = [packet(f.data, f.sport, f.dport) for f in ALL_FRAMES]
    numbers = tshark(tmp_path, packets, "-Y", "jgroups.unicast2.seqno > 20", "-T", "fields", "-e", "frame.number")
    wanted = [i + 1 for i, f in enumerate(ALL_FRAMES)
              if any(h.magic == jg.MAGIC_UNICAST2 and h.fields.get("seqno", 0) > 20
                     for m in jg.decode_datagram(f.data).messages for h in m.headers)]
    assert [int(n) for n in numbers.split()] == wanted and wanted


# ------------------------------------------------------------------------------------------------ forged frames

A = jg.JgUUID(0x0123456789ABCDEF, 0xFEDCBA9876543210)
B = jg.JgUUID(0x1111111111111111, 0x2222222222222222, additional_data=b"extra")
V6 = jg.JgIpAddress("fe80:0:0:0:0:0:0:1%3", 7801, scope_id=3)
V4 = jg.JgIpAddress("127.0.0.1", 7800)
TP = jg.tp_header("splitlab-frames")


def raw_header(proto_id: int, magic: int, body: bytes) -> jg.JgHeader:
    return jg.JgHeader(proto_id, magic, "forged", {}, body)


def addr(a: jg.JgAddress) -> bytes:
    return jg.encode_address(a)


def single(*headers: jg.JgHeader, dest: jg.JgAddress = A, src: jg.JgAddress = B, payload: bytes | None = None,
           flags: int = 0) -> bytes:
    return jg.encode_datagram(jg.make_datagram([jg.JgMessage(dest, src, flags, payload, (*headers, TP))]))


FORGED = {
    "FD heartbeat, mbrs null": single(raw_header(2, jg.MAGIC_FD, b"\x00" + b"\xff\xff" + addr(A))),
    "FD suspect of two": single(raw_header(2, jg.MAGIC_FD, b"\x02" + b"\x00\x02" + addr(A) + addr(B) + addr(None))),
    "FD heartbeat ack, no mbrs": single(raw_header(2, jg.MAGIC_FD, b"\x01" + b"\x00\x00" + addr(V4))),
    "IPv6 dest, UUID with additional data": single(jg.unicast_header("ACK", seqno=7), dest=V6, src=B),
    "unknown UNICAST2 type": single(raw_header(40, jg.MAGIC_UNICAST2, b"\x09")),
    "NAKACK XMIT_REQ without a range": single(raw_header(15, jg.MAGIC_NAKACK, b"\x02\x00" + addr(A))),
    "GMS MERGE_REQ with a MergeId": single(raw_header(14, jg.MAGIC_GMS, b"\x06\x00\x00" + addr(A) + b"\x00\x01"
                                                      + addr(B) + b"\x00\x00\x01" + addr(A) + b"\x00\x00\x00\x07"
                                                      + b"\x01\x00")),
    "FD_SOCK with a sock_addr and a cache": single(raw_header(3, jg.MAGIC_FD_SOCK, b"\x0e" + addr(A) + b"\x01"
                                                             + addr(V4)[1:] + b"\x00\x00\x00\x01" + addr(B)
                                                             + b"\x01" + addr(V6)[1:] + b"\xff\xff\xff\xff")),
    "a payload, no dest": single(jg.unicast2_header("DATA", seqno=-5, conn_id=-2, first=True), dest=None,
                                 payload=b"hello", flags=jg.OOB),
    "a bundle, a message with its own src": jg.encode_datagram(jg.make_datagram(
        [jg.JgMessage(None, A, 0, None, (jg.nakack_header("MSG", seqno=3), TP)),
         jg.JgMessage(None, B, 0, None, (jg.nakack_header("XMIT_RSP", seqno=4), TP))],
        bundle=True, multicast=True, list_src=A)),
}


@needs_tshark
def test_forged_frames_cover_what_the_captures_lack(tmp_path) -> None:
    names = sorted(FORGED)
    decoded = [jg.decode_datagram(FORGED[n]) for n in names]
    assert all(d.partial is None for d in decoded)
    for name, d, frame in zip(names, decoded, tshark_frames(tmp_path, [packet(FORGED[n]) for n in names])):
        assert_datagram(frame, d, name)
    kinds = {(m.headers[0].protocol, m.headers[0].kind) for d in decoded for m in d.messages}
    assert {("FD", "HEARTBEAT"), ("FD", "HEARTBEAT_ACK"), ("FD", "SUSPECT"), ("UNICAST2", "UNKNOWN_9")} <= kinds


@needs_tshark
def test_an_unknown_magic_number_is_undecodable_not_malformed(tmp_path) -> None:
    custom = raw_header(1000, 1500, b"\x01\x02\x03")
    ok = jg.JgMessage(A, B, 0, b"y", (jg.unicast2_header("DATA", seqno=1), TP))
    bad = jg.JgMessage(A, B, 0, b"x", (jg.unicast2_header("DATA", seqno=2), custom, TP))
    raw = jg.encode_datagram(jg.make_datagram([ok, bad, ok], bundle=True, list_dest=A, list_src=B))
    d = jg.decode_datagram(raw)
    assert d.partial and len(d.messages) == 2
    (frame,) = tshark_frames(tmp_path, [packet(raw)])
    messages = kids(root_of(frame), "jgroups.message")
    assert len(messages) == 2
    assert_message(messages[0], d.messages[0], d, "message 0")
    assert_header([f for f in kids(messages[1]) if f.get("name") in HEADER_FIELDS][0], d.messages[1].headers[0],
                  "message 1")
    experts = [f.get("showname", "") for f in frame.iter("field") if f.get("name") == "jgroups.undecodable"]
    assert experts and "magic 1500" in experts[0], ET.tostring(frame)[:3000]
    assert not [f for f in frame.iter("field") if f.get("name") == "jgroups.malformed"]
    ((info,),) = tshark_columns(tmp_path, [packet(raw)], "_ws.col.Info")
    assert info == "UNICAST2 DATA seqno=1 conn_id=0; UNICAST2 DATA seqno=2 conn_id=0, protocol-1000 magic 1500 " \
                   "(not in jg-magic-map.xml): not decoded"


# ------------------------------------------------------------------------------------------------ malformed

def _samples() -> list[bytes]:
    """Short real frames holding every header type of the fixtures (a bundle among them), and the forged ones."""
    chosen: dict[Any, bytes] = {}
    for f in sorted(ALL_FRAMES, key=lambda f: len(f.data)):
        d = jg.decode_datagram(f.data)
        for key in {h.magic for m in d.messages for h in m.headers} | {("bundle", d.is_list and len(d.messages) > 2)}:
            if len(f.data) <= 700:
                chosen.setdefault(key, f.data)
        kinds = {(h.magic, h.kind) for m in d.messages for h in m.headers if h.magic == jg.MAGIC_GMS}
        for key in kinds & {(jg.MAGIC_GMS, "INSTALL_MERGE_VIEW"), (jg.MAGIC_GMS, "JOIN_RSP")}:
            chosen.setdefault(key, f.data)
    return list(dict.fromkeys([*chosen.values(), *FORGED.values()]))


def _bad_bytes() -> dict[str, bytes]:
    beat = single(jg.fd_all_header())
    head = 3 + 1 + 1 + len(addr(A)) + len(addr(B))  # version, flags, leading, message flags, dest, src
    stable = single(jg.stable_header("STABLE_GOSSIP", [jg.JgDigestEntry(A, 0, 1, 2)]))
    return {
        "negative header count": beat[:head] + b"\xff\xff" + beat[head + 2:],
        "huge header count": beat[:head] + b"\x7f\xff" + beat[head + 2:],
        "negative digest count": stable.replace(b"\x00\x00\x00\x01\x01\x00\x01", b"\x00\x00\x00\x01\x01\xff\xff"),
        "address flags of another class": beat[:5] + b"\x00" + beat[6:],
        "an IP address of 5 bytes": single(jg.unicast_header("ACK", seqno=1), dest=V4).replace(b"\x04\x04\x7f",
                                                                                               b"\x04\x05\x7f"),
        "leading byte with unknown bits": beat[:3] + b"\x13" + beat[4:],
        "datagram flags with unknown bits": beat[:2] + b"\x09" + beat[3:],
        "not modified UTF-8": beat.replace(b"splitlab-frames", b"splitlab\xff\xfeframes"),
        "negative buffer length": single(jg.fd_all_header(), payload=b"abcd").replace(b"\x00\x00\x00\x04abcd",
                                                                                      b"\xff\xff\xff\xfcabcd"),
        "merge views nested too deep": single(raw_header(14, jg.MAGIC_GMS, b"\x08\x01\x01"
                                                         + (b"\x00\xff\xff\x00\x00" + b"\x00\x01\x01") * 12
                                                         + b"\x00\xff\xff\x00\x00\x00\x00"
                                                         + b"\x01\xff\xff\x00\x00\x00\x00\x01")),
    }


def _mutations(count: int, seed: int = 35) -> list[bytes]:
    rnd = random.Random(seed)
    pool = [f.data for f in ALL_FRAMES if len(f.data) <= 700]
    out = []
    for _ in range(count):
        data = bytearray(rnd.choice(pool))
        for _ in range(rnd.randint(1, 3)):
            at = rnd.randrange(len(data))
            action = rnd.choice(("flip", "set", "set", "cut", "insert", "delete"))
            if action == "flip":
                data[at] ^= 1 << rnd.randrange(8)
            elif action == "set":
                data[at] = rnd.choice((0x00, 0x01, 0x02, 0x04, 0x7F, 0x80, 0xFF))
            elif action == "cut":
                del data[max(at, 1):]
            elif action == "insert":
                data[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 6)))
            else:
                del data[at:at + rnd.randint(1, 6)]
        if data:
            out.append(bytes(data))
    return out


def _codec(data: bytes) -> jg.JgDatagram | WireError:
    try:
        return jg.decode_datagram(data)
    except WireError as e:
        return e


def assert_as_the_codec_says(tmp_path: Path, payloads: list[bytes]) -> dict[str, int]:
    """tshark on each payload says what the codec says: malformed with the same reason (or not JGroups at all, for
    another version), or as many messages, undecodable where the codec stops. Returns the count per outcome."""
    rows = tshark_columns(tmp_path, [packet(p) for p in payloads], "frame.protocols", "_ws.col.Info",
                          "_ws.expert.message", "jgroups.message")
    outcomes: dict[str, int] = {}
    for data, (protocols, info, experts, messages) in zip(payloads, rows):
        ours = _codec(data)
        where = f"{data.hex()} -> {ours!r}: {info!r} {experts!r}"
        assert "dissector error" not in info + experts, where
        if isinstance(ours, WireError) and ours.reason == "version":
            assert "jgroups" not in protocols.split(":"), where  # another version: declined, as the codec refuses
            outcome = "declined"
        elif isinstance(ours, WireError):
            assert info.startswith("[Malformed]"), where
            assert [e for e in experts.split("\x1e") if e.startswith(f"{ours.reason}: ")], where
            outcome = f"malformed {ours.reason}"
        else:
            assert not info.startswith("[Malformed]") and "truncated:" not in experts, where
            assert len([m for m in messages.split("\x1e") if m]) == len(ours.messages), where
            assert ("not decoded" in experts) == (ours.partial is not None), where
            outcome = "partial" if ours.partial else "decoded"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes


@needs_tshark
def test_every_truncation_is_malformed_with_the_codecs_reason(tmp_path) -> None:
    samples = _samples()
    assert len(samples) >= 20
    truncated = [data[:n] for data in samples for n in range(1, len(data))]
    outcomes = assert_as_the_codec_says(tmp_path, truncated)
    assert set(outcomes) <= {"malformed truncated", "malformed absurd"} and outcomes["malformed truncated"] > 1000


@needs_tshark
def test_bad_counts_flags_lengths_and_strings_are_malformed_with_the_codecs_reason(tmp_path) -> None:
    bad = _bad_bytes()
    reasons = {name: _codec(data) for name, data in bad.items()}
    assert all(isinstance(r, WireError) for r in reasons.values()), reasons
    assert {r.reason for r in reasons.values()} == {"absurd", "truncated", "unknown-address-type", "bad-string"}
    assert_as_the_codec_says(tmp_path, list(bad.values()))


@needs_tshark
def test_mutated_frames_read_as_the_codec_reads_them(tmp_path) -> None:
    outcomes = assert_as_the_codec_says(tmp_path, _mutations(600))
    assert outcomes.get("decoded", 0) > 50 and sum(n for o, n in outcomes.items() if o.startswith("malformed")) > 100


# ------------------------------------------------------------------------------------------------ ports

@needs_tshark
def test_jgroups_on_another_port_is_found_by_its_version(tmp_path) -> None:
    """jgnode's nodes use the contract's data port (7100): splitlab's own dissector declines their datagrams and the
    JGroups heuristic takes them; splitlab's datagrams stay splitlab's; other bytes are neither."""
    frame = ALL_FRAMES[0].data
    ours = node_wire.encode_datagram(node_wire.cluster_id_of("t"), "n1", [node_wire.Heartbeat(3)])
    port = node_wire.DATA_PORT
    packets = [packet(frame, port, port), packet(ours, port, port), packet(frame, 40001, 40002),
               packet(b"\x13\x02\x40" + bytes(20), 40001, 40002), packet(b"hello world", 40001, 40002)]
    rows = tshark_columns(tmp_path, packets, "frame.protocols", splitlab_too=True)
    tops = [row[0].split(":")[-1] for row in rows]
    assert tops == ["jgroups", "splitlab", "jgroups", "data", "data"]
    short = b"\x13\x02\x04"  # too short for the heuristic: only the ports 7800-7810 take it, as malformed
    rows = tshark_columns(tmp_path, [packet(short, 40000, p) for p in (7799, 7800, 7810, 7811)], "frame.protocols",
                          "_ws.col.Info")
    assert [(row[0].split(":")[-1], row[1].startswith("[Malformed]")) for row in rows] == \
        [("data", False), ("jgroups", True), ("jgroups", True), ("data", False)]
    (decoded,) = tshark_frames(tmp_path, [packets[0]], splitlab_too=True)
    assert_datagram(decoded, jg.decode_datagram(frame), "on port 7100")


# ------------------------------------------------------------------------------------------------ the CLI

def test_splitlab_wireshark_prints_and_installs_both_dissectors(tmp_path, capsys) -> None:
    assert splitlab(["wireshark", "lua", "--kind", "jgroups"]) == 0
    assert capsys.readouterr().out == wireshark_jgroups.lua()
    assert splitlab(["wireshark", "lua"]) == 0
    assert capsys.readouterr().out == wireshark.lua()
    assert splitlab(["wireshark", "install", "--dir", str(tmp_path / "both")]) == 0
    assert (tmp_path / "both" / "splitlab.lua").read_text() == wireshark.lua()
    assert (tmp_path / "both" / "splitlab_jgroups.lua").read_text() == wireshark_jgroups.lua()
    assert splitlab(["wireshark", "install", "--kind", "jgroups", "--dir", str(tmp_path / "one")]) == 0
    assert [p.name for p in (tmp_path / "one").iterdir()] == ["splitlab_jgroups.lua"]
    assert splitlab(["wireshark", "install", "--kind", "splitlab", "--dir", str(tmp_path / "other")]) == 0
    assert [p.name for p in (tmp_path / "other").iterdir()] == ["splitlab.lua"]
    (tmp_path / "file").write_text("")
    assert splitlab(["wireshark", "install", "--kind", "jgroups", "--dir", str(tmp_path / "file")]) == 1


def test_the_generated_lua_names_every_header_and_refuses_a_field_of_two_types() -> None:
    source = wireshark_jgroups.lua()
    assert source.startswith("\n-- generated by splitlab")
    for spec in layout.HEADERS.values():
        assert f'F["jgroups.{spec.name}"] = ProtoField.string' in source
    writer = wireshark_jgroups._Writer()
    writer.node(Struct("s", (Int("x", "u8"),)), "t")
    with pytest.raises(ValueError, match="jgroups.s.x"):
        writer.node(Struct("s", (Int("x", "i64"),)), "t")
