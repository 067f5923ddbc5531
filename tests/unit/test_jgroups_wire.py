"""jgnode.wire on real JGroups 2.12.2 datagrams.

The fixtures (tests/unit/data/jgroups/*.frames, README.md there) are UDP payloads captured with tcpdump on
127.0.0.1 while three JChannels of Debian's jgroups.jar talked, each line with what JGroups' own code read from
the same bytes (logged by FrameSource.java inside the receiving transport): the decoder is compared with JGroups'
reading, not with itself.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jgnode import layout, wire as jg
from node import wire as node_wire
from node.errors import WireError

DATA = Path(__file__).parent / "data" / "jgroups"
STACKS = ("unicast2", "unicast", "bundled")
JAR = Path("/usr/share/java/jgroups.jar")


@dataclasses.dataclass(frozen=True)
class Frame:
    stack: str
    line: int
    sport: int
    dport: int
    data: bytes
    note: dict | None  # JGroups' reading of the same bytes (FrameSource.java), None if no member received them

    def __str__(self) -> str:
        return f"{self.stack}.frames:{self.line}"


def _load(stack: str) -> list[Frame]:
    frames = []
    with open(DATA / f"{stack}.frames") as f:
        for number, line in enumerate(f, 1):
            sport, dport, hex_bytes, note = line.rstrip("\n").split(" ", 3)
            frames.append(Frame(stack, number, int(sport), int(dport), bytes.fromhex(hex_bytes), json.loads(note)))
    return frames


FRAMES = {stack: _load(stack) for stack in STACKS}
ALL_FRAMES = [frame for stack in STACKS for frame in FRAMES[stack]]
NOTED = [f for f in ALL_FRAMES if f.note is not None]


def _decoded(stack: str) -> list[tuple[Frame, jg.JgDatagram]]:
    return [(f, jg.decode_datagram(f.data)) for f in FRAMES[stack]]


def _messages(stack: str) -> list[jg.JgMessage]:
    return [m for _, d in _decoded(stack) for m in d.messages]


# ------------------------------------------------------------------------------------------------ JGroups' view
# FrameSource logs header fields by reflection: addresses as {"uuid"| "ip": text}, a Digest as its `senders`
# map, a View as vid/members(/subgroups), a Range as low/high, a MergeId as initiator/id. Both sides are brought
# to one plain form.

def _java_plain(value: Any) -> Any:
    if isinstance(value, list):
        return [_java_plain(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "uuid" in value:
        return value["uuid"]
    if "ip" in value:
        return value["ip"]
    if "senders" in value:
        return sorted((_java_plain(member), row["low_seqno"], row["highest_delivered_seqno"],
                       row["highest_received_seqno"]) for member, row in value["senders"]["map"])
    if "vid" in value:
        return {"view_id": _java_plain(value["vid"]), "members": _java_plain(value["members"]),
                "subgroups": _java_plain(value["subgroups"]) if "subgroups" in value else None}
    if "coord_addr" in value:
        return [_java_plain(value["coord_addr"]), value["id"]]
    if set(value) == {"low", "high"}:
        return [value["low"], value["high"]]
    if set(value) == {"initiator", "id"}:
        return [_java_plain(value["initiator"]), value["id"]]
    if set(value) == {"map"}:
        return [_java_plain(pair) for pair in value["map"]]
    return {k: _java_plain(v) for k, v in value.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, (jg.JgUUID, jg.JgIpAddress)):
        return str(value)
    if isinstance(value, jg.JgViewId):
        return [_plain(value.coord), value.id]
    if isinstance(value, jg.JgView):
        return {"view_id": _plain(value.view_id), "members": _plain(value.members),
                "subgroups": _plain(value.subgroups)}
    if isinstance(value, tuple) and value and isinstance(value[0], jg.JgDigestEntry):
        return sorted((str(e.member), e.low, e.highest_delivered, e.highest_received) for e in value)
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


JAVA_FIELD_NAMES = {(jg.MAGIC_STABLE, "digest"): "stableDigest"}
# fields JGroups reads into a HashMap or HashSet: compared without their order
UNORDERED = {(jg.MAGIC_FD_SOCK, "cachedAddrs"), (jg.MAGIC_FD_SOCK, "mbrs")}
# headers whose toString() names their type, so our kind must appear in JGroups' own text
TYPE_IN_TOSTRING = {jg.MAGIC_UNICAST, jg.MAGIC_UNICAST2, jg.MAGIC_NAKACK, jg.MAGIC_STABLE, jg.MAGIC_GMS,
                    jg.MAGIC_PING, jg.MAGIC_VERIFY_SUSPECT, jg.MAGIC_FC}


def _address_text(java_addr: dict | None) -> str | None:
    return None if java_addr is None else _java_plain(java_addr)


def _assert_header_as_jgroups_read_it(ours: jg.JgHeader, java: dict, where: str) -> None:
    assert (ours.proto_id, ours.magic, ours.protocol) == (java["id"], java["magic"], java["protocol"]), where
    if ours.magic in TYPE_IN_TOSTRING:
        assert ours.kind in java["str"], f"{where}: kind {ours.kind} not in JGroups' {java['str']!r}"
    for name, value in ours.fields.items():
        java_name = JAVA_FIELD_NAMES.get((ours.magic, name), name)
        assert java_name in java["fields"], f"{where}: JGroups' {java['class']} has no field {java_name}"
        ours_plain, java_plain = _plain(value), _java_plain(java["fields"][java_name])
        if (ours.magic, name) in UNORDERED and ours_plain is not None and java_plain is not None:
            ours_plain, java_plain = sorted(ours_plain), sorted(java_plain)
        assert ours_plain == java_plain, f"{where}: {name}: ours {ours_plain!r}, JGroups' {java_plain!r}"


def _assert_datagram_as_jgroups_read_it(d: jg.JgDatagram, note: dict, where: str) -> None:
    assert (d.version, d.flags & 0xFF, d.is_list, d.is_multicast) == \
        (note["version"], note["flags"] & 0xFF, note["list"], note["multicast"]), where
    assert len(d.messages) == len(note["messages"]), where
    for i, (ours, java) in enumerate(zip(d.messages, note["messages"])):
        at = f"{where} message {i}"
        assert _plain(ours.dest) == _address_text(java["dest"]), at
        assert _plain(ours.src) == _address_text(java["src"]), at
        assert ours.flags == java["flags"] & 0xFF, at
        assert (ours.payload_length if ours.payload is not None else -1) == java["length"], at
        assert len(ours.headers) == len(java["headers"]), at
        for j, (h, jh) in enumerate(zip(ours.headers, java["headers"])):
            _assert_header_as_jgroups_read_it(h, jh, f"{at} header {j} ({jh['str']})")


# ------------------------------------------------------------------------------------------------ real frames

def test_fixtures_hold_real_frames_of_every_stack():
    for stack in STACKS:
        assert len(FRAMES[stack]) > 50, stack
        assert sum(f.note is not None for f in FRAMES[stack]) > 0.9 * len(FRAMES[stack]), stack


@pytest.mark.parametrize("stack", STACKS)
def test_every_frame_decodes_whole(stack):
    for frame, d in _decoded(stack):
        assert d.partial is None, frame
        assert d.version_text == "2.12.2", frame
        assert d.messages, frame
        assert all(m.headers and m.headers[-1].magic == jg.MAGIC_TP for m in d.messages), frame


@pytest.mark.parametrize("stack", STACKS)
def test_decode_equals_what_jgroups_read(stack):
    compared = 0
    for frame, d in _decoded(stack):
        if frame.note is None:
            continue
        assert "error" not in frame.note, frame
        _assert_datagram_as_jgroups_read_it(d, frame.note, str(frame))
        compared += 1
    assert compared > 50


def test_reliability_headers_match_jgroups_field_by_field():
    """The fields fault rules key on, spelled out: seqno, conn_id, first, high_seqno, range, and the kind."""
    seen = set()
    for frame in NOTED:
        d = jg.decode_datagram(frame.data)
        for ours, java in zip(d.messages, frame.note["messages"]):
            for h, jh in zip(ours.headers, java["headers"]):
                f, jf = h.fields, jh["fields"]
                if h.magic in (jg.MAGIC_UNICAST, jg.MAGIC_UNICAST2):
                    kinds = jg.UNICAST_KINDS if h.magic == jg.MAGIC_UNICAST else jg.UNICAST2_KINDS
                    assert kinds[jf["type"]] == h.kind, frame
                    if h.kind == "DATA":
                        assert (f["seqno"], f["conn_id"], f["first"]) == (jf["seqno"], jf["conn_id"], jf["first"])
                    if h.kind in ("XMIT_REQ", "STABLE"):
                        assert (f["seqno"], f["high_seqno"]) == (jf["seqno"], jf["high_seqno"]), frame
                    seen.add((h.protocol, h.kind))
                if h.magic == jg.MAGIC_NAKACK:
                    assert jg.NAKACK_KINDS[jf["type"]] == h.kind, frame
                    if h.kind == "XMIT_REQ":
                        assert f["range"] == (jf["range"]["low"], jf["range"]["high"]), frame
                    else:
                        assert f["seqno"] == jf["seqno"], frame
                    seen.add((h.protocol, h.kind))
    assert seen >= {("UNICAST2", k) for k in jg.UNICAST2_KINDS.values()} | \
        {("UNICAST", k) for k in jg.UNICAST_KINDS.values()} | {("NAKACK", k) for k in jg.NAKACK_KINDS.values()}


EXPECTED_TYPES = {
    "unicast2": {"Unicast2Data", "Unicast2XmitReq", "Unicast2SendFirstSeqno", "Unicast2Stable", "NakackMsg",
                 "NakackXmitReq", "NakackXmitRsp", "FdAllHeartbeat", "PingReq", "PingRsp", "Merge2DiscoveryReq",
                 "VerifySuspectAreYouDead", "VerifySuspectIAmNotDead"},
    "unicast": {"UnicastData", "UnicastAck", "UnicastSendFirstSeqno", "NakackMsg", "NakackXmitReq",
                "NakackXmitRsp", "Merge2DiscoveryRsp", "FdSockWhoHasSock", "FdSockIHaveSock", "FdSockGetCache",
                "FdSockGetCacheRsp"},
    "bundled": {"Unicast2Data", "Unicast2Stable", "NakackMsg"},
}


@pytest.mark.parametrize("stack", STACKS)
def test_the_real_frames_hold_every_type_and_classify_as_jgroups_names_them(stack):
    names = set()
    for frame, d in _decoded(stack):
        java_messages = frame.note["messages"] if frame.note else [None] * len(d.messages)
        for message, java in zip(d.messages, java_messages):
            name, fields = jg.classify(message)
            names.add(name)
            assert name in jg.MESSAGE_TYPES
            if java is not None:
                assert name == _name_from_jgroups(java), frame
                _assert_rule_fields(name, fields, java, str(frame))
    assert names >= EXPECTED_TYPES[stack]
    assert "JgOther" not in names


def _name_from_jgroups(java_message: dict) -> str:
    """The type name from JGroups' own reading (protocol name and header type), in classify's documented order."""
    by_protocol = {h["protocol"]: h for h in java_message["headers"]}
    for protocol, prefix, kinds in (("UNICAST2", "Unicast2", jg.UNICAST2_KINDS),
                                    ("UNICAST", "Unicast", jg.UNICAST_KINDS),
                                    ("NAKACK", "Nakack", jg.NAKACK_KINDS)):
        if protocol in by_protocol:
            kind = kinds[by_protocol[protocol]["fields"]["type"]]
            return prefix + "".join(p.capitalize() for p in kind.split("_"))
    if "GMS" in by_protocol:
        kind = layout.GMS_KINDS[by_protocol["GMS"]["fields"]["type"]]
        return "Gms" + "".join(p.capitalize() for p in kind.split("_"))
    if "STABLE" in by_protocol:
        return {1: "StableGossip", 2: "StableStabilityMsg"}[by_protocol["STABLE"]["fields"]["type"]]
    if "VERIFY_SUSPECT" in by_protocol:
        return {1: "VerifySuspectAreYouDead", 2: "VerifySuspectIAmNotDead"}[
            by_protocol["VERIFY_SUSPECT"]["fields"]["type"]]
    if "FD_SOCK" in by_protocol:
        kind = layout.FD_SOCK_KINDS[by_protocol["FD_SOCK"]["fields"]["type"]]
        return "FdSock" + "".join(p.capitalize() for p in kind.split("_"))
    if "FD_ALL" in by_protocol:
        return "FdAllHeartbeat"
    if "TCPPING" in by_protocol:
        ping = by_protocol["TCPPING"]["fields"]
        if ping["type"] == 1:
            return "Merge2DiscoveryReq" if ping["view_id"] is not None else "PingReq"
        return "Merge2DiscoveryRsp" if ping["data"]["view"] is not None else "PingRsp"
    return "JgOther"


def _assert_rule_fields(name: str, fields: dict, java_message: dict, where: str) -> None:
    by_protocol = {h["protocol"]: h["fields"] for h in java_message["headers"]}
    if name in ("Unicast2Data", "UnicastData"):
        jf = by_protocol["UNICAST2" if name.startswith("Unicast2") else "UNICAST"]
        assert {k: fields[k] for k in ("seqno", "conn_id", "first")} == \
            {"seqno": jf["seqno"], "conn_id": jf["conn_id"], "first": jf["first"]}, where
    elif name in ("Unicast2XmitReq", "Unicast2Stable"):
        jf = by_protocol["UNICAST2"]
        assert (fields["seqno"], fields["high"]) == (jf["seqno"], jf["high_seqno"]), where
    elif name in ("Unicast2SendFirstSeqno", "UnicastAck", "NakackMsg", "NakackXmitRsp"):
        jf = by_protocol["UNICAST2" if name.startswith("Unicast2") else "UNICAST" if name.startswith("Unicast")
                         else "NAKACK"]
        assert fields["seqno"] == jf["seqno"], where
    elif name == "NakackXmitReq":
        jf = by_protocol["NAKACK"]
        assert (fields["seqno"], fields["high"], fields["sender"]) == \
            (jf["range"]["low"], jf["range"]["high"], jf["sender"]["uuid"]), where


def test_a_view_travels_as_nakack_msg_with_gms_inside():
    views = [m for m in _messages("unicast") if m.header("GMS") and m.header("GMS").kind == "VIEW"]
    assert views
    names = set()
    for m in views:
        name, fields = jg.classify(m)
        assert name in ("NakackMsg", "NakackXmitRsp") and fields["inner"] == "GmsView"  # a view may be resent
        assert jg.header_types(m)[:2] == (name, "GmsView")
        names.add(name)
    assert "NakackMsg" in names


def test_the_merge_is_decoded_to_its_subgroups():
    merges = [m.header("GMS") for m in _messages("unicast")
              if m.header("GMS") and m.header("GMS").kind == "INSTALL_MERGE_VIEW"]
    assert merges
    view = merges[0].fields["view"]
    assert view.subgroups is not None and len(view.subgroups) == 2
    assert sorted(len(g.members) for g in view.subgroups) == [1, 2]
    assert len(view.members) == 3


def test_addresses_print_as_jgroups_prints_them():
    ping = next(m.header("TCPPING") for m in _messages("unicast2") if m.header("TCPPING"))
    physical = ping.fields["data"]["physical_addrs"][0]
    assert isinstance(physical, jg.JgIpAddress) and str(physical).startswith("127.0.0.1:78")
    uuid = ping.fields["data"]["own_addr"]
    assert str(uuid) == f"{uuid.msb >> 32:08x}-{(uuid.msb >> 16) & 0xffff:04x}-{uuid.msb & 0xffff:04x}-" \
                        f"{uuid.lsb >> 48:04x}-{uuid.lsb & 0xffffffffffff:012x}"
    assert uuid.pair == (uuid.msb, uuid.lsb)


# ------------------------------------------------------------------------------------------------ bundles

def _bundles(min_messages: int) -> list[tuple[Frame, jg.JgDatagram]]:
    return [(f, d) for f, d in _decoded("bundled") if d.is_list and len(d.messages) >= min_messages]


def test_a_list_bundle_holds_several_messages_as_jgroups_read_them():
    bundles = _bundles(3)
    assert len(bundles) >= 5
    assert any(d.is_multicast for _, d in bundles) and any(not d.is_multicast for _, d in bundles)
    for frame, d in bundles:
        assert frame.note is None or len(frame.note["messages"]) == len(d.messages)
        assert all(m.dest == d.list_dest for m in d.messages)


def test_rebuild_keeps_the_chosen_messages_of_a_bundle():
    for frame, d in _bundles(3):
        n = len(d.messages)
        assert jg.rebuild(d, list(range(n))) == frame.data, frame
        for keep in ([0], [n - 1], [i for i in range(n) if i % 2 == 0], [n - 1, 0], [1, 1]):
            rebuilt = jg.decode_datagram(jg.rebuild(d, keep))
            assert rebuilt.messages == tuple(d.messages[i] for i in keep), (frame, keep)
            assert (rebuilt.flags, rebuilt.list_dest, rebuilt.list_src) == (d.flags, d.list_dest, d.list_src)
        assert jg.rebuild(d, []) == b""


def test_rebuild_of_a_single_message_is_all_or_nothing():
    frame, d = next((f, d) for f, d in _decoded("unicast2") if not d.is_list)
    assert jg.rebuild(d, [0]) == frame.data
    assert jg.rebuild(d, []) == b""
    with pytest.raises(ValueError):
        jg.rebuild(d, [0, 0])
    with pytest.raises(ValueError):
        jg.rebuild(d, [1])


# ------------------------------------------------------------------------------------------------ encoding

def test_every_real_frame_reencodes_to_its_bytes():
    for frame in ALL_FRAMES:
        assert jg.encode_datagram(jg.decode_datagram(frame.data)) == frame.data, frame


def test_the_header_builders_write_what_jgroups_wrote():
    built = 0
    for frame in ALL_FRAMES:
        for m in jg.decode_datagram(frame.data).messages:
            for h in m.headers:
                f = h.fields
                if h.magic == jg.MAGIC_UNICAST2:
                    twin = jg.unicast2_header(h.kind, seqno=f.get("seqno", 0), high_seqno=f.get("high_seqno", 0),
                                              conn_id=f.get("conn_id", 0), first=f.get("first", False))
                elif h.magic == jg.MAGIC_UNICAST:
                    twin = jg.unicast_header(h.kind, seqno=f.get("seqno", 0), conn_id=f.get("conn_id", 0),
                                             first=f.get("first", False))
                elif h.magic == jg.MAGIC_NAKACK:
                    twin = jg.nakack_header(h.kind, seqno=f.get("seqno", -1), range=f.get("range"),
                                            sender=f.get("sender"))
                elif h.magic == jg.MAGIC_STABLE:
                    twin = jg.stable_header(h.kind, f["digest"])
                elif h.magic == jg.MAGIC_TP:
                    twin = jg.tp_header(f["channel_name"])
                elif h.magic == jg.MAGIC_FD_ALL:
                    twin = jg.fd_all_header()
                else:
                    continue
                assert twin == h, frame
                built += 1
    assert built > 1000


A = jg.JgUUID(0x0123456789ABCDEF, 0xFEDCBA9876543210)
B = jg.JgUUID(0x1111111111111111, 0x2222222222222222, additional_data=b"extra")
PHYSICAL = jg.JgIpAddress("127.0.0.1", 7801)


def _forged() -> list[jg.JgDatagram]:
    tp = jg.tp_header("splitlab-frames")
    digest = (jg.JgDigestEntry(A, 0, 5, 7), jg.JgDigestEntry(B, 1, 2, 2))
    data = jg.JgMessage(B, A, 0, b"hello", (jg.unicast2_header("DATA", seqno=9, conn_id=3, first=True), tp))
    stable = jg.JgMessage(A, B, 0, None, (jg.unicast2_header("STABLE", seqno=4, high_seqno=9), tp))
    xmit = jg.JgMessage(A, B, jg.OOB, None, (jg.nakack_header("XMIT_REQ", range=(3, 8), sender=A), tp))
    first = jg.JgMessage(A, B, jg.OOB, None, (jg.unicast2_header("SEND_FIRST_SEQNO", seqno=12), tp))
    ack = jg.JgMessage(PHYSICAL, None, 0, b"", (jg.unicast_header("ACK", seqno=-3), tp))
    gossip = jg.JgMessage(None, A, 0, None, (jg.stable_header("STABLE_GOSSIP", digest),
                                             jg.nakack_header("MSG", seqno=2), tp))
    beat = jg.JgMessage(None, B, jg.OOB, None, (jg.fd_all_header(), tp))
    singles = [jg.make_datagram([m], multicast=m.dest is None) for m in (data, stable, xmit, first, ack, gossip,
                                                                         beat)]
    return singles + [
        jg.make_datagram([data, stable, data], bundle=True, list_dest=B, list_src=A),
        jg.make_datagram([gossip, dataclasses.replace(gossip, src=B), gossip], bundle=True, multicast=True,
                         list_src=A),
        jg.make_datagram([stable], bundle=True, list_dest=A, list_src=None),
    ]


def test_decode_of_encode_is_identity():
    for d in _forged():
        raw = jg.encode_datagram(d)
        assert jg.decode_datagram(raw) == d
        assert jg.encode_datagram(jg.decode_datagram(raw)) == raw


def test_forged_fields_are_what_was_asked():
    data, stable, xmit, first, ack = (d.messages[0] for d in _forged()[:5])
    assert jg.classify(data) == ("Unicast2Data", {"seqno": 9, "conn_id": 3, "first": True})
    assert jg.classify(stable) == ("Unicast2Stable", {"seqno": 4, "high": 9})
    assert jg.classify(xmit) == ("NakackXmitReq", {"seqno": 3, "high": 8, "sender": str(A)})
    assert jg.classify(first) == ("Unicast2SendFirstSeqno", {"seqno": 12})
    assert jg.classify(ack) == ("UnicastAck", {"seqno": -3})
    assert jg.classify(jg.JgMessage(A, B, 0, None, (jg.tp_header("x"),))) == ("JgOther", {})


@pytest.mark.slow
def test_the_real_jar_reads_forged_datagrams_as_forged(tmp_path):
    """FrameSource's `parse` mode feeds the bytes to JGroups' own TP.readMessage / readMessageList."""
    if not (shutil.which("javac") and shutil.which("java") and JAR.exists()):
        pytest.fail("needs javac, java and Debian's libjgroups-java on the host: 'make host-deps' installs them")
    subprocess.run(["javac", "-nowarn", "-cp", str(JAR), "-d", str(tmp_path), str(DATA / "FrameSource.java")],
                   check=True, capture_output=True, timeout=120)
    forged = _forged()
    stdin = "".join(jg.encode_datagram(d).hex() + "\n" for d in forged)
    done = subprocess.run(["java", "-Djava.net.preferIPv4Stack=true", "-cp", f"{tmp_path}:{JAR}", "FrameSource",
                           "parse"], input=stdin, check=True, capture_output=True, text=True, timeout=120)
    notes = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(notes) == len(forged)
    for i, (d, note) in enumerate(zip(forged, notes)):
        assert "error" not in note, note
        _assert_datagram_as_jgroups_read_it(d, note, f"forged datagram {i}")


# ------------------------------------------------------------------------------------------------ bad bytes

def test_every_truncation_of_every_frame_raises_wire_error():
    for frame in ALL_FRAMES:  # some 200,000 prefixes: a few seconds
        data = frame.data
        for length in range(len(data)):
            with pytest.raises(WireError) as caught:
                jg.decode_datagram(data[:length])
            assert caught.value.reason in ("truncated", "absurd", "version", "bad-string"), (str(frame), length)


def test_bad_bytes_say_why():
    good = FRAMES["unicast2"][0].data
    cases = {
        "version": b"\x13\x42" + good[2:],  # 2.13.2: another minor version
        "absurd": good[:2] + b"\x08" + good[3:],  # a TP flag bit TP never sets
        "truncated": b"\x13",
    }
    for reason, data in cases.items():
        with pytest.raises(WireError) as caught:
            jg.decode_datagram(data)
        assert caught.value.reason == reason
    other_address = jg.encode_datagram(_forged()[0])
    other_address = other_address[:5] + b"\x00" + other_address[6:]  # dest flags 0: a class by magic number
    with pytest.raises(WireError) as caught:
        jg.decode_datagram(other_address)
    assert caught.value.reason == "unknown-address-type"


def test_a_header_it_cannot_decode_makes_the_rest_partial():
    custom = jg.JgHeader(1000, 1500, "CUSTOM", {}, b"\x01\x02\x03")  # a user protocol's header, magic 1500
    first = jg.unicast2_header("DATA", seqno=1)
    message = jg.JgMessage(A, B, 0, b"x", (first, custom, jg.tp_header("c")))
    ok = jg.JgMessage(A, B, 0, b"y", (first, jg.tp_header("c")))
    single = jg.decode_datagram(jg.encode_datagram(jg.make_datagram([message])))
    assert single.partial and "magic number 1500" in single.partial
    assert single.messages[0].headers == (first,)
    assert jg.classify(single.messages[0])[0] == "Unicast2Data"
    bundle_raw = jg.encode_datagram(jg.make_datagram([ok, message, ok], bundle=True, list_dest=A, list_src=B))
    bundle = jg.decode_datagram(bundle_raw)
    assert len(bundle.messages) == 2 and bundle.partial and bundle.messages[1].partial
    assert jg.rebuild(bundle, [0, 1]) == bundle_raw
    assert jg.decode_datagram(jg.rebuild(bundle, [0])).messages == (bundle.messages[0],)
    with pytest.raises(ValueError):
        jg.rebuild(bundle, [1, 0])


def _gms_datagram(gms_body: bytes) -> bytes:
    """A datagram of one message with a GmsHeader of the given body (laid out by hand as GmsHeader.writeTo)."""
    gms = jg.JgHeader(14, jg.MAGIC_GMS, "hand-made", {}, gms_body)
    return jg.encode_datagram(jg.make_datagram([jg.JgMessage(A, B, 0, None, (gms, jg.tp_header("c")))]))


def _view_bytes(view_number: int, members: list[jg.JgUUID], payload: bytes) -> bytes:
    return (b"\x01" + jg.encode_address(A) + view_number.to_bytes(8, "big")  # ViewId: presence, coord, id
            + len(members).to_bytes(2, "big") + b"".join(jg.encode_address(m) for m in members)
            + len(payload).to_bytes(2, "big", signed=True) + payload)


GMS_TAIL = b"\x01" + b"\xff\xff" + b"\x00" * 3 + b"\x00\x01"  # mbr null, mbrs null, no join_rsp/digest/merge_id


def test_a_view_payload_is_skipped_by_its_length():
    body = b"\x05\x00\x01" + _view_bytes(7, [A, B], b"\xac\xed\x00\x05") + GMS_TAIL  # VIEW, not merge, present
    gms = jg.decode_datagram(_gms_datagram(body)).messages[0].headers[0]
    assert gms.kind == "VIEW" and gms.body == body
    view = gms.fields["view"]
    assert (view.view_id, view.members, view.payload, view.subgroups) == (jg.JgViewId(A, 7), (A, B),
                                                                          b"\xac\xed\x00\x05", None)
    assert (gms.fields["mbr"], gms.fields["mbrs"], gms.fields["useFlushIfPresent"]) == (None, None, True)


def test_merge_views_nested_too_deep_are_absurd_not_a_crash():
    def nested(depth: int) -> bytes:  # a MergeView whose one subgroup is a MergeView, `depth` times
        view = b"\x00" + b"\xff\xff" + b"\x00\x00"  # no view id, members null, no payload
        one_subgroup = b"\x00\x01" + b"\x01"  # subgroup count 1, and it is a merge view
        return (view + one_subgroup) * depth + view + b"\x00\x00"

    shallow = jg.decode_datagram(_gms_datagram(b"\x08\x01\x01" + nested(3) + GMS_TAIL))
    view = shallow.messages[0].headers[0].fields["view"]
    assert view.subgroups[0].subgroups[0].subgroups[0].subgroups == ()
    with pytest.raises(WireError) as caught:
        jg.decode_datagram(_gms_datagram(b"\x08\x01\x01" + nested(3000) + GMS_TAIL))
    assert caught.value.reason == "absurd"


_REAL = [f.data for f in ALL_FRAMES]


@st.composite
def _mutated(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(_REAL)))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(("flip", "set", "cut", "insert", "delete")))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if action == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "set" and data:
            data[at] = draw(st.sampled_from((0x00, 0x01, 0x02, 0x04, 0x7F, 0x80, 0xFF)))
        elif action == "cut":
            del data[at:]
        elif action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del data[at:at + draw(st.integers(1, 8))]
    return bytes(data)


def _decode_or_wire_error(data: bytes) -> None:
    try:
        d = jg.decode_datagram(data)
    except WireError as e:
        assert e.reason in ("truncated", "absurd", "version", "bad-string", "unknown-address-type")
        return
    for message in d.messages:
        name, _ = jg.classify(message)
        assert jg.type_code(name) >= 0x1000
        str(message.dest), str(message.src), [str(h) for h in message.headers]
    if d.is_list and d.messages and not d.messages[-1].partial:
        assert jg.decode_datagram(jg.rebuild(d, list(range(len(d.messages))))).messages == d.messages


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated())
def test_mutated_real_frames_decode_or_raise_wire_error_only(data):
    _decode_or_wire_error(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=300), st.binary(max_size=300).map(lambda b: b"\x13\x02" + b),
                 st.binary(max_size=300).map(lambda b: b"\x13\x02\x01" + b)))
def test_random_bytes_decode_or_raise_wire_error_only(data):
    _decode_or_wire_error(data)


# ------------------------------------------------------------------------------------------------ type codes

def test_type_codes_are_stable_distinct_and_clear_of_splitlabs_own():
    codes = list(jg.MESSAGE_TYPES.values())
    assert len(set(codes)) == len(codes)
    assert min(codes) >= 0x1000
    assert max(node_wire.message_types()) < 0x1000
    assert jg.MESSAGE_TYPES["Unicast2Stable"] == 0x1013 and jg.MESSAGE_TYPES["JgOther"] == 0x1000
    for name, code in jg.MESSAGE_TYPES.items():
        assert jg.type_name(code) == name and jg.type_code(name) == code == jg.type_code(code)
    with pytest.raises(KeyError):
        jg.type_name(7)
    with pytest.raises(KeyError):
        jg.type_code("Unicast2Ack")


def test_the_id_tables_hold_what_the_brief_and_the_xml_say():
    assert (jg.PROTOCOL_IDS[12], jg.PROTOCOL_IDS[40], jg.PROTOCOL_IDS[15], jg.PROTOCOL_IDS[21]) == \
        ("UNICAST", "UNICAST2", "NAKACK", "UDP")
    assert jg.MAGIC_NUMBERS[21].endswith("UNICAST$UnicastHeader")
    assert jg.MAGIC_NUMBERS[73].endswith("UNICAST2$Unicast2Header")
    assert jg.VERSION == 0x1302 and jg.version_text(jg.VERSION) == "2.12.2"
