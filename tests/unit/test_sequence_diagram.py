"""The message sequence diagram's data (pipeline.sequence, pure Python): arrows from transmissions to receptions,
drops, duplicates, holds, multicasts by view, fault windows, findings drawn first under the cap, the default
window, the capture's arrivals, and the HTML section that embeds it all."""
from __future__ import annotations

import json
import re

import pytest

from node import wire
from node.errors import UsageError
from pipeline import sequence, sequence_html
from pipeline.sequence import DiagramOptions, Window, asked_window, build, default_window, parse_window
from pipeline.sequence_findings import Finding, findings_of
from pipeline.report_data import FaultPeriod
from pipeline_fixtures import spark  # noqa: F401  (the shared Spark session)

T0 = 1_700_000_000.0
NODES = ["n1", "n2", "n3"]
WHOLE = Window(T0, T0 + 60, T0, "asked for")


def ev(node: str, t_s: float, type_: str, **fields) -> dict:
    return {"node": node, "ts": T0 + t_s, "type": type_, **fields}


def data_tx(src, dst, t_s, seqno, resend=False, proto="unicast3", conn_id=7):
    return ev(src, t_s, "data_tx", proto=proto, to=dst, seqno=seqno, conn_id=conn_id, resend=resend)


def data_rx(src, dst, t_s, seqno, action="deliver", proto="unicast3", conn_id=7):
    return ev(dst, t_s, "data_rx", proto=proto, **{"from": src}, seqno=seqno, conn_id=conn_id, action=action)


def diagram(events, window=WHOLE, **kw):
    return build(events, window, nodes=NODES, t0_ts=T0, **kw)


def arrows_of(d):
    return [(a.src, a.dst, a.label, None if a.send_ts is None else round(a.send_ts - T0, 3),
             None if a.recv_ts is None else round(a.recv_ts - T0, 3), sorted(a.marks)) for a in d.arrows]


def test_each_transmission_becomes_an_arrow_to_its_reception_and_one_never_received_is_lost():
    d = diagram([data_tx("n1", "n2", 1.0, 1), data_tx("n1", "n2", 1.1, 2), data_tx("n1", "n2", 1.2, 3),
                 data_rx("n1", "n2", 1.002, 1), data_rx("n1", "n2", 1.203, 3, action="buffer"),
                 ev("n2", 1.204, "ack_tx", proto="unicast3", to="n1", seqno=1, conn_id=7),
                 ev("n1", 1.206, "ack_rx", proto="unicast3", **{"from": "n2"}, seqno=1, conn_id=7, action="accepted")])
    assert arrows_of(d) == [("n1", "n2", "UnicastData #1", 1.0, 1.002, []),
                            ("n1", "n2", "UnicastData #2", 1.1, None, ["lost"]),
                            ("n1", "n2", "UnicastData #3", 1.2, 1.203, []),
                            ("n2", "n1", "UnicastAck #1", 1.204, 1.206, [])]
    assert d.messages_in_window == 4 and d.left_out == 0 and d.lanes == NODES


def test_a_second_arrival_is_a_duplicate_a_discard_is_marked_and_an_unexplained_arrival_is_unsent():
    d = diagram([data_tx("n1", "n2", 1.0, 5), data_rx("n1", "n2", 1.001, 5), data_rx("n1", "n2", 1.002, 5, "duplicate"),
                 data_tx("n1", "n2", 2.0, 6, resend=True), data_rx("n1", "n2", 2.001, 6, "below_window"),
                 data_rx("n3", "n2", 3.0, 9)])
    assert arrows_of(d) == [("n1", "n2", "UnicastData #5", 1.0, 1.001, []),
                            ("n1", "n2", "UnicastData #5", 1.0, 1.002, ["discarded", "duplicate"]),
                            ("n1", "n2", "UnicastData #6", 2.0, 2.001, ["discarded", "resend"]),
                            ("n3", "n2", "UnicastData #9", None, 3.0, ["unsent"])]


def _hold(kind: str, start_s: float, end_s: float, ms: float) -> FaultPeriod:
    code = {c.__name__: t for t, c in wire.message_types().items()}[kind]
    return FaultPeriod("h1", "msg_fault", T0 + start_s, T0 + end_s,
                       {"type": code, "src": "n2", "dst": "n1", "action": "hold", "ms": ms})


def _ack(t_s, node="n2", to="n1"):
    return ev(node, t_s, "ack_tx", proto="unicast3", to=to, seqno=20, conn_id=7)


def _ack_rx(t_s):
    return ev("n1", t_s, "ack_rx", proto="unicast3", **{"from": "n2"}, seqno=20, conn_id=7, action="accepted")


def test_a_held_message_is_matched_by_the_hold_its_fault_says_and_marked_held():
    events = [_ack(1.0), _ack(6.45), _ack_rx(6.5)]  # the held one arrives; the one just before it is lost
    held = diagram(events, faults=[_hold("UnicastAck", 0.0, 3.0, 5500)])
    assert arrows_of(held) == [("n2", "n1", "UnicastAck #20", 1.0, 6.5, ["held"]),
                               ("n2", "n1", "UnicastAck #20", 6.45, None, ["lost"])]
    assert held.held_ms == sequence.HELD_MIN_MS
    # a hold of another type says nothing about acks: the nearest transmission is the one that arrived
    other = diagram(events, faults=[_hold("UnicastStable", 0.0, 3.0, 5500)])
    assert arrows_of(other) == [("n2", "n1", "UnicastAck #20", 1.0, None, ["lost"]),
                                ("n2", "n1", "UnicastAck #20", 6.45, 6.5, [])]
    # after the hold ended, a fresh ack goes straight through while the held one is still in transit
    both = diagram([_ack(1.0), _ack(6.4), _ack_rx(6.41), _ack_rx(6.5)], faults=[_hold("UnicastAck", 0, 3, 5500)])
    assert arrows_of(both) == [("n2", "n1", "UnicastAck #20", 1.0, 6.5, ["held"]),
                               ("n2", "n1", "UnicastAck #20", 6.4, 6.41, [])]


def test_a_multicast_goes_to_the_members_of_its_senders_view():
    nak = dict(proto="nakack4", conn_id=0)
    views = [ev("n1", 0.1, "view", members=NODES), ev("n1", 2.0, "view", members=["n1", "n2"])]
    d = diagram([data_tx("n1", "*", 1.0, 1, **nak), data_rx("n1", "n2", 1.001, 1, **nak),
                 data_rx("n1", "n3", 1.002, 1, **nak), data_tx("n1", "*", 3.0, 2, **nak),
                 data_tx("n1", "n3", 3.5, 2, resend=True, **nak)], views=views)
    assert arrows_of(d) == [("n1", "n2", "Nakack4Msg #1", 1.0, 1.001, []),
                            ("n1", "n3", "Nakack4Msg #1", 1.0, 1.002, []),
                            ("n1", "n2", "Nakack4Msg #2", 3.0, None, ["lost"]),
                            ("n1", "n3", "Nakack4XmitRsp #2", 3.5, None, ["lost", "resend"])]


def test_fault_windows_inside_the_drawn_span_are_kept_with_a_label_and_heals_too():
    faults = [FaultPeriod("p0", "partition", T0 + 0.1, T0 + 0.5, {"grudge": {"n2": ["n1"]}}),
              FaultPeriod("p1", "partition", T0 + 0.9, T0 + 3.0, {"grudge": {"n2": ["n1"], "n3": ["n1"]}}),
              _hold("UnicastAck", 1.5, 30.0, 200), FaultPeriod("k1", "kill", T0 + 9, T0 + 12, {"node": "n3"})]
    d = diagram([data_tx("n1", "n2", 1.0, 1), data_rx("n1", "n2", 2.0, 1)], faults=faults, heals_ts=[T0 + 3.0, T0 + 9])
    assert [(f.fault_id, sequence.fault_label(f)) for f in d.faults] == [
        ("p1", "partition n2<-n1 n3<-n1"), ("h1", "msg_fault UnicastAck n2->n1 hold 200 ms")]
    data = d.to_dict()
    assert [(f["start_s"], f["end_s"]) for f in data["faults"]] == [(1.0, 2.0), (1.5, 2.0)]  # clipped to the span
    assert data["heals_s"] == [] and sequence.fault_label(faults[3]) == "kill n3"
    assert diagram([data_tx("n1", "n2", 1.0, 1), data_rx("n1", "n2", 3.5, 1)], heals_ts=[T0 + 3.0]).heals_ts == [T0 + 3]


LOOP = [ev("n3", 1.0 + 0.1 * i, "xmit_req_tx", proto="unicast3", to="n2", seqnos=[9, 10]) for i in range(5)] + [
    data_tx("n2", "n3", 1.05 + 0.1 * i, 9, resend=True, conn_id=6) for i in range(5)]
FINDINGS = [Finding("first_lost", "first lost", T0 + 0.5, "n1", "n2", 2),
            Finding("retransmission_loop", "loop", T0 + 1.0, "n2", "n3", 9, "unicast3")]


def test_findings_are_highlighted_and_kept_first_when_the_arrows_are_capped():
    chatter = [e for i in range(40) for e in (data_tx("n1", "n3", 0.2 + 0.05 * i, 100 + i),
                                              data_rx("n1", "n3", 0.201 + 0.05 * i, 100 + i))]
    events = chatter + LOOP + [data_tx("n1", "n2", 0.5, 2), data_tx("n1", "n2", 0.8, 2, resend=True)]
    d = diagram(events, Window(T0, T0 + 10, T0 + 0.2, "asked for"), findings=FINDINGS, max_arrows=15)
    assert d.messages_in_window == 52 and len(d.arrows) == 15 and d.left_out == 37
    lost = [a for a in d.arrows if 0 in a.findings]
    loop = [a for a in d.arrows if 1 in a.findings]
    assert [(a.label, sorted(a.marks)) for a in lost] == [("UnicastData #2", ["finding", "lost"]),
                                                         ("UnicastData #2", ["finding", "lost", "resend"])]
    assert sorted(a.label for a in loop) == ["UnicastData #9"] * 5 + ["UnicastXmitReq [9..10]"] * 5
    assert d.finding_arrows == [[a.id for a in lost], [a.id for a in loop]]
    others = [a for a in d.arrows if not a.findings]  # the rest of the cap: the nearest to the anchor (0.2 s)
    assert [a.label for a in others] == ["UnicastData #100", "UnicastData #101", "UnicastData #102"]
    assert [a.id for a in d.arrows] == list(range(15)) and [a.at_ts for a in d.arrows] == sorted(
        a.at_ts for a in d.arrows)


def test_findings_are_read_from_the_checks_details():
    details = {"delivery": {"missing_msgs": [
        {"msg_id": "n1.5.21", "sender": "n1", "receiver": "n2", "send_ts": T0 + 9, "seqno": 21, "fate": "buffered"},
        {"msg_id": "n1.5.22", "sender": "n1", "receiver": "n2", "send_ts": T0 + 9.1, "seqno": 22}]},
        "endless_retransmission": {"examples": [{"requester": "n2", "sender": "n1", "proto": "unicast2", "seqno": 2,
                                                 "requests": 102, "first_ts": T0 + 5.6}]},
        "resends_without_request": {"examples": []}}
    assert findings_of(details) == [
        Finding("first_lost", "first lost message: n1.5.21 from n1 to n2 (seqno 21, buffered)", T0 + 9, "n1", "n2", 21),
        Finding("retransmission_loop", "retransmission loop: n2 asked n1 for unicast2 #2 102 times in vain",
                T0 + 5.6, "n1", "n2", 2, "unicast2")]
    assert findings_of({"delivery": {"missing_msgs": []}}) == []


def test_the_default_window_opens_around_the_first_finding_else_the_first_fault_else_the_start():
    fault = FaultPeriod("p1", "partition", T0 + 20, T0 + 30, {})
    assert default_window(FINDINGS, [fault], T0, T0 + 60) == Window(T0, T0 + 4.5, T0 + 0.5, "around the first finding")
    assert default_window([], [fault], T0, T0 + 60) == Window(T0 + 19, T0 + 24, T0 + 20, "around the first fault")
    assert default_window([], [], T0, T0 + 2) == Window(T0, T0 + 2, T0, "from the run's start")
    assert asked_window((5, 9.5), T0) == Window(T0 + 5, T0 + 9.5, T0 + 5, "asked for")
    d = diagram([data_tx("n1", "n2", 0.5, 1), data_tx("n1", "n2", 5.5, 2), data_tx("n1", "n2", 9.9, 3)],
                asked_window((5, 9.5), T0))
    assert [a.label for a in d.arrows] == ["UnicastData #2"] and d.messages_in_window == 1
    empty = diagram([], asked_window((5, 9.5), T0)).to_dict()
    assert (empty["drawn"], empty["span"], empty["lanes"]) == (0, {"start_s": 5.0, "end_s": 9.5}, NODES)


def test_window_options_are_checked():
    assert parse_window("5:9.5") == (5.0, 9.5) and parse_window(" 0 : 2 ") == (0.0, 2.0)
    for bad in ("5", "a:b", "-1:2", "5:9:10"):
        with pytest.raises(UsageError, match="START_S:END_S"):
            parse_window(bad)
    with pytest.raises(UsageError, match="START_S must be below END_S"):
        DiagramOptions(window_s=(9.0, 5.0))
    with pytest.raises(UsageError, match="at least 1 arrow"):
        DiagramOptions(max_arrows=0)
    options = DiagramOptions(window_s=(1.0, 2.0), max_arrows=7)
    assert DiagramOptions.from_dict(json.loads(json.dumps(options.to_dict()))) == options
    assert DiagramOptions.from_dict(None) == DiagramOptions()


def _wire_ack(t_s: float, src="n2", dst="n1") -> sequence.End:
    return sequence.End(T0 + t_s, src, dst, "UnicastAck", (20, 7), {"seqno": 20, "conn_id": 7}, wire=True)


def test_capture_arrivals_end_the_arrows_the_receiver_did_not_record_and_add_injected_ones():
    events = [_ack(1.0), _ack_rx(1.002), _ack(2.0)]  # the second never recorded at n1 ...
    heartbeat = sequence.End(T0 + 2.5, "n2", "n1", "Heartbeat", (), {"counter": 3}, wire=True)
    d = diagram(events, wire_ends=[_wire_ack(1.001), _wire_ack(2.001), _wire_ack(3.0, src="n3"), heartbeat])
    assert arrows_of(d) == [("n2", "n1", "UnicastAck #20", 1.0, 1.002, []),  # its capture is the recorded arrival
                            ("n2", "n1", "UnicastAck #20", 2.0, 2.001, ["unrecorded"]),  # ... but it arrived
                            ("n3", "n1", "UnicastAck #20", None, 3.0, ["unrecorded", "unsent"])]  # forged


def test_the_capture_file_is_decoded_into_arrivals(tmp_path):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.packet import Raw

    from chaos.wire.capture import write_pcap
    from pipeline.sequence_wire import captured_ends

    def packet(src_ip, dst_ip, sender, messages):
        datagram = wire.encode_datagram(1, sender, messages, incarnation=5)
        return bytes(IP(src=src_ip, dst=dst_ip) / UDP(sport=wire.DATA_PORT, dport=wire.DATA_PORT) / Raw(datagram))

    def packet6(src_ip, dst_ip, sender, messages):
        datagram = wire.encode_datagram(1, sender, messages, incarnation=5)
        return bytes(IPv6(src=src_ip, dst=dst_ip) / UDP(sport=wire.DATA_PORT, dport=wire.DATA_PORT) / Raw(datagram))

    path = tmp_path / "capture.pcap"
    write_pcap(path, [
        (T0 + 1.0, packet("10.9.0.2", "10.9.0.3", "n1", [wire.UnicastData(4, 7, False, b"x"), wire.Heartbeat(1)])),
        (T0 + 1.5, packet("10.9.0.3", "10.9.0.2", "n2", [wire.UnicastXmitReq(7, (4, 5))])),
        (T0 + 1.6, packet("10.9.0.3", "10.9.0.99", "n2", [wire.UnicastAck(4, 7, 0)])),  # not a node's address
        (T0 + 30.0, packet("10.9.0.2", "10.9.0.3", "n1", [wire.UnicastData(5, 7, False, b"y")]))])  # too late
    ends = captured_ends(path, {"10.9.0.2": "n1", "10.9.0.3": "n2"}, T0, T0 + 10)
    assert [(round(e.ts - T0, 3), e.src, e.dst, e.msg, e.key, e.wire) for e in ends] == [
        (1.0, "n1", "n2", "UnicastData", (4, 7), True), (1.5, "n2", "n1", "UnicastXmitReq", (4,), True)]
    assert ends[1].fields["seqnos"] == [4, 5]

    six = tmp_path / "capture6.pcap"  # an IPv6 run's (splitlab up --ipv6): its nodes' data_ip are IPv6 addresses
    write_pcap(six, [(T0 + 2.0, packet6("fd00::102", "fd00::101", "n2", [wire.UnicastAck(4, 7, 0)])),
                     (T0 + 2.5, packet("10.9.0.2", "10.9.0.3", "n1", [wire.Heartbeat(2)]))])
    ends = captured_ends(six, {"fd00::101": "n1", "fd00::102": "n2"}, T0, T0 + 10)
    assert [(e.src, e.dst, e.msg, e.key) for e in ends] == [("n2", "n1", "UnicastAck", (4, 7))]


def test_a_capture_of_the_real_jgroups_is_decoded_into_arrivals_named_as_its_history_names_them(tmp_path):
    from scapy.layers.inet import IP, UDP
    from scapy.packet import Raw

    from chaos.wire.capture import write_pcap
    from jgnode import wire as jg
    from pipeline.sequence import message_of
    from pipeline.sequence_wire import captured_ends

    a, b = jg.JgUUID(1, 2), jg.JgUUID(3, 4)

    def packet(src_ip, dst_ip, header, payload=None):
        message = jg.JgMessage(b if src_ip.endswith("3") else a, a if src_ip.endswith("3") else b, 0, payload,
                               (header, jg.tp_header("run")))
        datagram = jg.encode_datagram(jg.make_datagram([message]))
        return bytes(IP(src=src_ip, dst=dst_ip) / UDP(sport=7100, dport=7100) / Raw(datagram))

    path = tmp_path / "capture.pcap"
    write_pcap(path, [
        (T0 + 1.0, packet("10.9.0.2", "10.9.0.3", jg.unicast2_header("DATA", seqno=4, conn_id=7), b"x")),
        (T0 + 1.5, packet("10.9.0.3", "10.9.0.2", jg.unicast2_header("XMIT_REQ", seqno=2, high_seqno=4))),
        (T0 + 1.6, packet("10.9.0.3", "10.9.0.2", jg.fd_all_header())),  # a heartbeat: not drawn
        (T0 + 1.7, packet("10.9.0.3", "10.9.0.2", jg.unicast2_header("XMIT_REQ", seqno=1, high_seqno=10**15)))])
    ends = captured_ends(path, {"10.9.0.2": "n1", "10.9.0.3": "n2"}, T0, T0 + 10)
    assert [(round(e.ts - T0, 3), e.src, e.dst, e.msg, e.key) for e in ends] == [
        (1.0, "n1", "n2", "Unicast2Data", (4, 7)), (1.5, "n2", "n1", "Unicast2XmitReq", (2,)),
        (1.7, "n2", "n1", "Unicast2XmitReq", (1,))]
    assert ends[1].fields["seqnos"] == [2, 3, 4] and len(ends[2].fields["seqnos"]) == 1000
    # the real nodes' own events name the same messages, so capture and history meet on one arrow
    assert message_of({"type": "data_rx", "proto": "UNICAST2"}) == "Unicast2Data"
    assert message_of({"type": "xmit_req_tx", "proto": "UNICAST2"}) == "Unicast2XmitReq"
    assert message_of({"type": "resync_tx", "proto": "UNICAST", "kind": "first_seqno_req"}) == "UnicastSendFirstSeqno"
    assert message_of({"type": "data_tx", "proto": "NAKACK", "resend": True}) == "NakackXmitRsp"


def test_the_html_section_embeds_the_data_safely_and_says_what_was_left_out():
    faults = [FaultPeriod("p1", "partition", T0 + 0.9, T0 + 3.0, {"note": "</script><script>alert(1)</script>"})]
    events = [data_tx("n1", "n2", 1.0 + 0.1 * i, i) for i in range(6)]
    d = diagram(events, Window(T0, T0 + 10, T0, "asked for"), faults=faults, max_arrows=4)
    page = sequence_html.section(d)
    assert page.count("</script>") == 2 and "alert(1)" in page  # the data's own tags are escaped inside the JSON
    payload = re.search(r'<script type="application/json" id="seq-data">(.*?)</script>', page).group(1)
    data = json.loads(payload)
    assert data["drawn"] == 4 and data["left_out"] == 2 and data["faults"][0]["detail"]["note"].startswith("</script>")
    assert "6 messages, 4 drawn, 2 left out" in sequence_html.note(d)
    assert "http" not in page.replace("http://www.w3.org/2000/svg", "")  # nothing fetched from anywhere


def test_spark_reads_the_windows_events_and_at_most_max_read_events_nearest_its_anchor(tmp_path, spark,  # noqa: F811
                                                                                      monkeypatch):
    import pipeline_fixtures as pf
    from pipeline import sequence_source
    from pipeline.reader import read_history
    from pipeline.rundir import locate
    from pipeline.tables import Tables

    s = pf.Scenario(run_id="seq-read")
    for i in range(20):  # seqno i + 1 sent at 0.1 * i s, received 1 ms later
        s.add("n1", 0.1 * i, "data_tx", proto="unicast3", to="n2", seqno=i + 1, conn_id=7, first=False,
              resend=False, size=10)
        s.add("n2", 0.1 * i + 0.001, "data_rx", proto="unicast3", **{"from": "n1"}, seqno=i + 1, conn_id=7,
              first=False, action="deliver")
    run_dir = s.write(tmp_path / "run")
    tables = Tables(spark, read_history(spark, locate(run_dir)))
    try:
        whole = sequence_source.diagram(tables, run_dir, {}, DiagramOptions(window_s=(0.05, 0.95)))
        assert (whole.messages_in_window, whole.not_read, whole.capture) == (9, 0, None)
        assert [a.conn_id for a in whole.arrows] == [7] * 9 and not any(a.marks for a in whole.arrows)
        monkeypatch.setattr(sequence_source, "MAX_READ_EVENTS", 8)
        near = sequence_source.diagram(tables, run_dir, {}, DiagramOptions(window_s=(1.04, 3.0)))
    finally:
        tables.release()
    assert near.not_read == 32  # the 8 events nearest 1.04 s: those of seqnos 10..13 (sent at 0.9 to 1.2 s)
    assert [a.label for a in near.arrows] == ["UnicastData #12", "UnicastData #13"]
    assert "32 protocol events around the window were not read" in sequence_html.note(near)
